"""How many partitions a job is split into (docs/architecture.md, "Splitting a job into
partitions"): the count is the job's, recorded in partition 0's meta hash (field
``partitions``; absent for a job of one partition, today's layout)."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from ..config import MAX_PARTITIONS
from .errors import StoreError, translate_errors
from .keys import JobKeys
from .records import as_text

#: the field of partition 0's meta hash that holds the job's partition count
PARTITIONS_FIELD = "partitions"


def partitions_of_meta(meta: Mapping[str, str], job: str = "") -> int:
    """The partition count partition 0's meta hash (as text) records: 1 when absent.

    Raises StoreError for a count this version cannot read (another program wrote it)."""
    return _count(meta.get(PARTITIONS_FIELD), job)


def job_partitions(client: redis.Redis, job: str) -> int:
    """How many partitions job ``job`` is split into (one HGET of partition 0's meta; 1 for a
    job of one partition, or one that does not exist)."""
    with translate_errors(client):
        raw = client.hget(JobKeys(job).meta, PARTITIONS_FIELD)
    return _count(None if raw is None else as_text(raw), job)


def _count(text: str | None, job: str) -> int:
    if not text:
        return 1
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_PARTITIONS:
        raise StoreError(f"job {job!r} records {text!r} partitions: not a count this version "
                         f"reads (1..{MAX_PARTITIONS})")
    return count
