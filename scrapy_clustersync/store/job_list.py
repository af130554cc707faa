"""The jobs on a Redis, found by their meta keys (for ``clustersync jobs``; nodes never scan)."""

from __future__ import annotations

import time

import redis

from .errors import translate_errors
from .keys import PREFIX, JobKeys
from .records import as_text

SCAN_COUNT = 1000


def job_names(client: redis.Redis) -> list[str]:
    """The jobs on this Redis, sorted: every ``clustersync:{JOB}:meta`` hash, found with SCAN
    (never KEYS, which blocks a large Redis while it runs)."""
    prefix, suffix = f"{PREFIX}:{{", "}:meta"
    with translate_errors(client):
        found = client.scan_iter(match=f"{prefix}*{suffix}", count=SCAN_COUNT, _type="hash")
        names = {as_text(key)[len(prefix):-len(suffix)] for key in found}
    # (a partition's meta, ``{JOB/p}``, is part of its job, not a job: no job name holds "/")
    return sorted(name for name in names
                  if "/" not in name and JobKeys(name).meta == f"{prefix}{name}{suffix}")


def round_trip_s(client: redis.Redis) -> float:
    """Seconds one PING to this Redis takes (``clustersync serve``'s metrics)."""
    with translate_errors(client):
        started = time.perf_counter()
        client.ping()
        return time.perf_counter() - started
