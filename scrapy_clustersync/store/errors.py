"""The store's own exceptions: the Scrapy-facing modules never see a ``redis`` exception."""

from __future__ import annotations


class StoreError(Exception):
    """Redis answered, but not as expected (a script error, a wrong type, a refused command)."""


class StoreUnavailable(StoreError):
    """Redis cannot be used right now: connection refused or lost, timeout, or a server that
    cannot take writes for now (a replica after a failover, loading, out of memory, ...)."""


class StateLost(StoreError):
    """The job's keys are gone or were replaced: Redis restarted empty or the job was purged."""
