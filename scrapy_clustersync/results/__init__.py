"""Results: the items, error records and raw pages a job's nodes write to its ``results``
stream (docs/results.md). This package is pure: the format lives here, Redis access in store/.
"""

from __future__ import annotations

from .record_format import (
    FORMAT_VERSION,
    KINDS,
    Result,
    decode_record,
    encode_record,
    to_json_value,
)

__all__ = ["FORMAT_VERSION", "KINDS", "Result", "decode_record", "encode_record",
           "to_json_value"]
