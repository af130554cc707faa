"""The store's own exceptions: the Scrapy-facing modules never see a ``redis`` exception."""

from __future__ import annotations


class StoreError(Exception):
    """Redis answered, but not as expected (a script error, a wrong type, a refused command)."""


class StoreUnavailable(StoreError):
    """Redis cannot be reached right now (connection refused or lost, timeout, loading)."""


class StateLost(StoreError):
    """The job's keys are gone or were replaced: Redis restarted empty or the job was purged."""
