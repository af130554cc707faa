"""The only layer that talks to Redis."""

from __future__ import annotations

from .client import make_client
from .errors import StateLost, StoreError, StoreUnavailable
from .job import DeadLetter, FlushResult, JobStatus, JobStore, Op

__all__ = [
    "DeadLetter", "FlushResult", "JobStatus", "JobStore", "Op",
    "StateLost", "StoreError", "StoreUnavailable", "make_client",
]
