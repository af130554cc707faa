"""The store's own exceptions: the Scrapy-facing modules never see a ``redis`` exception."""

from __future__ import annotations


class StoreError(Exception):
    """Redis answered, but not as expected (a script error, a wrong type, a refused command)."""


class StoreUnavailable(StoreError):
    """Redis cannot be used right now: connection refused or lost, timeout, or a server that
    cannot take writes for now (a replica after a failover, loading, out of memory, ...)."""


class StateLost(StoreError):
    """The job's keys are gone or were replaced: Redis restarted empty or the job was purged."""


class RolledBack(StoreError):
    """Redis came back older than this node saw it: writes it confirmed to the node are gone.

    A restart from a lagging snapshot, an AOF that lost its last second, a failover to a replica
    that lagged. Nothing was changed by the call that found it; the node must forget what it
    believed stored (see ``SyncWorker``) before it writes on.
    """


class BadBatch(StoreError):
    """A batch of writes holds an op the flush script refuses, or one redis-py cannot even
    send (a value of a type it does not encode); nothing of it was applied.

    Retrying the same batch can never succeed: the caller sets the bad op aside.
    """
