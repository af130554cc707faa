"""The store's own exceptions: the Scrapy-facing modules never see a ``redis`` exception."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis


class StoreError(Exception):
    """Redis answered, but not as expected (a script error, a wrong type, a refused command)."""


class StoreUnavailable(StoreError):
    """Redis cannot be reached right now (connection refused or lost, timeout, loading)."""


class StateLost(StoreError):
    """The job's keys are gone or were replaced: Redis restarted empty or the job was purged."""


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn redis-py exceptions into the store's own."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
        raise StoreUnavailable(str(exc) or type(exc).__name__) from exc
    except redis.OutOfMemoryError as exc:
        raise StoreError(f"OOM {exc}") from exc  # redis-py drops the prefix that says it all
    except redis.ResponseError as exc:
        if "CLUSTERSYNC_STATE_LOST" in str(exc):
            raise StateLost(str(exc)) from exc
        raise StoreError(str(exc)) from exc
    except redis.RedisError as exc:
        raise StoreError(str(exc)) from exc
