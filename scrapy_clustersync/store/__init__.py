"""The only layer that talks to Redis."""

from __future__ import annotations

from .client import make_client
from .errors import StateLost, StoreError, StoreUnavailable
from .formats import DeadLetter
from .job import JobStore
from .ops import Ack, DeadLetterEntry, DeadLetterWrite, Op, Push, PushFlags, Release, StartDone
from .results import FlushResult, JobStatus, Leased

__all__ = [
    "Ack", "DeadLetter", "DeadLetterEntry", "DeadLetterWrite", "FlushResult", "JobStatus",
    "JobStore", "Leased", "Op", "Push", "PushFlags", "Release", "StartDone", "StateLost",
    "StoreError", "StoreUnavailable", "make_client",
]
