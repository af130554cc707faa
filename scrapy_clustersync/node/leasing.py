"""Leasing, on the node's Redis thread (part of ``redis_thread.SyncWorker``).

The thread leases when what it handed the reactor and the engine has not taken yet falls to
half the reactor's target (``Demand``: what the node can start before the next lease arrives,
less what its engine holds and has not started, lease_sizing.py), and leases what is missing;
nothing while the target is 0. It leases at once, whatever the target, when the engine starves
for the node's own pushes and those are all in Redis (``WantLease``). An empty queue is asked
again after a growing pause (``EMPTY_QUEUE_BACKOFF_MAX_S`` at most), and immediately after the
node pushed something. The lease call's time is measured: the reactor sizes its target from it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import ClusterConfig
from ..store import JobStore, Leased
from ..store.control_state import RUNNING
from ..store.job_store import new_call_id
from ..store.round_trip import Answer, RoundTrip
from ..store.script_results import LeaseBatch
from .lease_sizing import HORIZON_ROUND_TRIPS, MIN_HORIZON_S

if TYPE_CHECKING:
    from .reactor_link import NodeLink
    from .write_stream import WriteStream

logger = logging.getLogger(__name__)

EMPTY_QUEUE_BACKOFF_MAX_S = 0.5
#: a lease that got nothing because of a site's pace asks again when told, but not sooner
MIN_PACED_RETRY_S = 0.01
#: the weight of the last lease call's time in the round trip's average
ROUND_TRIP_WEIGHT = 0.2
#: the reactor is told the round trip again when it moved by this share
ROUND_TRIP_TELL_CHANGE = 0.25


@dataclass(frozen=True)
class LeaseCall:
    """A lease added to a round trip, until its answer is handed over."""

    answer: Answer[LeaseBatch]
    count: int  # entries asked for
    #: pushes of the batch ahead of it in the round trip (0: none, or a lease sent again)
    settling: int
    returning: int = 0  # hand-backs of that batch (``WriteStream.returns_settled``), the same


class LeasingPart:
    """The leasing of ``SyncWorker`` (see the module doc)."""

    store: JobStore
    config: ClusterConfig
    epoch: str
    _post: Callable[..., object]
    _link: NodeLink
    _writes: WriteStream
    _held: set[str]
    _unstarted: dict[str, int]
    _releasing: set[str]
    _drop_asked: bool
    _state_lost: str | None
    _results_full_since: float | None
    _control: str | None

    def _init_leasing(self) -> None:
        config = self.config
        #: entries the reactor wants leased ahead and not taken (``Demand``)
        self._demand = config.prefetch_start if config.prefetch_sized else config.prefetch
        self._pending_lease: tuple[str, int, int] | None = None  # call id, count, covered
        self._lease_covered = 0  # pushes Redis had applied when the last lease was made
        self._lease_returned = 0  # hand-backs Redis had applied when the pending lease was made
        self._wanted_after = 0  # the reactor starves until a lease covers this many pushes
        #: the pushes the node had made when the engine began to starve (the first WantLease
        #: since a lease covered the one before): the lease that answers it goes in between
        self._starved_at = 0
        self._next_lease = 0.0
        self._empty_backoff_s = 0.0
        self._round_trip_s = 0.0  # lease calls' time, averaged
        self._round_trip_told = 0.0  # as the reactor was last told it (NodeView)

    def _lease_wanted_after(self, pushes: int) -> None:
        """The engine starves until a lease covers the node's first ``pushes`` pushes."""
        self._wanted_after = pushes
        if self._lease_covered >= self._starved_at:  # not starving for earlier pushes still
            self._starved_at = pushes

    def _lease_due(self, now: float, settling: int = 0) -> bool:
        """A lease should go now; ``settling``: pushes of a batch that goes ahead of it."""
        # the reactor starves for its own pushes, and every one it waits for is in Redis now
        # (or is in the batch ahead of the lease)
        settled = self._writes.pushes_settled + settling
        awaited = (self._lease_covered < self._wanted_after <= settled
                   or self._lease_covered < self._starved_at <= settled)
        if awaited:
            return self._lease_allowed()
        return now >= self._next_lease and self._lease_wanted()

    def _lease_allowed(self) -> bool:
        """False under back-pressure, while the job is paused or stopping, or while a rejoin's
        releases are on their way."""
        return not (self._state_lost or len(self._writes) > self.config.buffer_limit
                    or self._control != RUNNING or self._releasing or self._drop_asked
                    or self._results_full_since is not None)

    def _lease_wanted(self) -> bool:
        # a target of 0: what the engine holds covers what the node can start (lease_sizing.py)
        demand = self._demand
        return demand > 0 and self._lease_allowed() and self._prefetched_usable() <= demand // 2

    def _prefetched_usable(self) -> int:
        """The entries handed to the reactor and not taken that its engine can start: not those
        leased before the pushes it starves for were in Redis (it hands them back, a newer push
        of the node first: prefetch.py), lest the lease that answers it be sized without them."""
        awaited = self._wanted_after if self._lease_covered < self._wanted_after else 0
        if not awaited:
            return len(self._unstarted)
        return sum(covered >= awaited for covered in self._unstarted.values())

    def _lease(self) -> bool:
        """Lease, in a round trip of its own; False if nothing came."""
        trip = self.store.round_trip()
        call = self._lease_in(trip)
        started = time.monotonic()
        trip.send()
        return self._lease_answered(call, time.monotonic() - started)

    def _lease_in(self, trip: RoundTrip, settling: int = 0, returning: int = 0) -> LeaseCall:
        """Add the lease to ``trip``: what is missing of the target, or the call whose answer
        was lost, again. ``settling``: pushes of the batch ahead of it in ``trip``, which Redis
        applies before it leases, if it takes the batch (``_lease_answered`` is told)."""
        fresh = self._pending_lease is None
        if self._pending_lease is None:
            count = max(1, min(self.config.prefetch, self._demand) - self._prefetched_usable())
            self._pending_lease = (new_call_id(), count, self._writes.pushes_settled)
            self._lease_returned = self._writes.returns_settled
        call_id, count, _ = self._pending_lease
        lease_ms = int(self.config.lease_timeout_s * 1000)
        # what a paced site may start before the next lease comes (lease_sizing.py's horizon)
        horizon_ms = int(1000 * max(MIN_HORIZON_S, HORIZON_ROUND_TRIPS * self._round_trip_s))
        # the node holds nothing (nothing leased under way or waiting to start): it may take
        # the work of other regions (regions.py)
        foreign = not self._held and not self._unstarted
        answer = self.store.lease_in(trip, self.epoch, count, lease_ms, call_id, horizon_ms,
                                     foreign)
        return LeaseCall(answer, count, settling if fresh else 0, returning if fresh else 0)

    def _lease_answered(self, call: LeaseCall, took_s: float, settled: bool = False) -> bool:
        """Hand the reactor a lease's answer; False if nothing came. ``took_s``: its round
        trip's time; ``settled``: Redis took the batch ahead of it in the round trip (its
        ``settling`` pushes) before the lease."""
        entries = call.answer.result()
        self._measured(took_s)
        logger.debug("clustersync: leased %d of %d (target %d, %d not taken, round trip %.1f ms)",
                     len(entries), call.count, self._demand, len(self._unstarted),
                     self._round_trip_s * 1000)
        assert self._pending_lease is not None
        covered, returned = self._pending_lease[2], self._lease_returned
        if settled:  # (a lease sent again on its own ran later still)
            covered += call.settling
            returned += call.returning
        self._pending_lease = None
        if self._drop_asked:
            # the heartbeat ahead of it in the round trip told the node it was declared dead:
            # the reactor drops what it holds before this answer would reach it, and the
            # releases of that drop would return these entries to the queue while it held
            # them. They go back to the queue instead (they may be the node's own under way)
            ids = [entry.entry_id for entry in entries]
            self._held.update(ids)
            self._releasing.update(ids)
            self._writes.release(ids)
            return False
        self._took_lease(entries, covered, returned)
        if not entries:
            backoff_s = self._empty_backoff_s * 2 or 0.05
            self._empty_backoff_s = min(EMPTY_QUEUE_BACKOFF_MAX_S, backoff_s)
            wait_s = self._empty_backoff_s
            if entries.retry_s is not None:  # a site's pace, not an empty queue: ask then
                wait_s = min(wait_s, max(MIN_PACED_RETRY_S, entries.retry_s))
            self._next_lease = time.monotonic() + wait_s
            return False
        self._empty_backoff_s = 0.0
        return True

    def _measured(self, call_s: float) -> None:
        average = self._round_trip_s
        average = call_s if not average else average + ROUND_TRIP_WEIGHT * (call_s - average)
        self._round_trip_s = average
        told = self._round_trip_told
        if abs(average - told) > ROUND_TRIP_TELL_CHANGE * told or not told:
            self._round_trip_told = average

    def _took_lease(self, entries: list[Leased], covered: int, returned: int) -> None:
        """Hand a lease's answer to the reactor (an empty one too, if it covers more pushes:
        an engine starving for them learns they came back as nothing)."""
        self._held.update(entry.entry_id for entry in entries)
        self._unstarted.update(dict.fromkeys((entry.entry_id for entry in entries), covered))
        if entries or covered > self._lease_covered:
            self._post(self._link.leased, tuple(entries), covered, returned)
        self._lease_covered = max(self._lease_covered, covered)
