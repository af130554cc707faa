"""The only layer that talks to Redis."""

from __future__ import annotations

from .client import make_client
from .errors import StateLost, StoreError, StoreUnavailable
from .job_store import JobStore
from .records import DeadLetter
from .script_results import FlushResult, JobStatus, Leased
from .write_ops import (
    Ack,
    DeadLetterEntry,
    DeadLetterWrite,
    Op,
    Push,
    PushFlags,
    Release,
    StartDone,
)

__all__ = [
    "Ack", "DeadLetter", "DeadLetterEntry", "DeadLetterWrite", "FlushResult", "JobStatus",
    "JobStore", "Leased", "Op", "Push", "PushFlags", "Release", "StartDone", "StateLost",
    "StoreError", "StoreUnavailable", "make_client",
]
