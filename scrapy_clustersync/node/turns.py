"""One turn of the node's Redis thread: what is due, in one round trip (part of
``redis_thread.SyncWorker``).

A turn sends what is due of the heartbeat, the next batch of writes, a lease, a look at the
job's control state, when their version moved the job's shared settings, and the sites'
politeness calls (site_calls.py) together
(store/round_trip.py). Each would be a round trip of its own, and
far from Redis that is what the thread spends its time on: a lease that waited behind the three
others came three round trips later, while the downloader ran dry. Redis runs them in that
order, so the lease finds the batch's pushes and releases queued, as the reactor judges the
lease's entries (prefetch.py: ``covered``). Their answers are applied in the same order; an
error stops the turn where it is raised (outages.py), and a call whose answer was not applied
is sent again under the same call id, so Redis applies it once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store import FlushResult, JobStore, Push
from ..store.errors import BadBatch, ResultsFull
from ..store.round_trip import Answer, RoundTrip
from ..store.shared_settings import SharedSettings

if TYPE_CHECKING:
    from ..config import ClusterConfig
    from ..store.closespider_script import ClusterCounts
    from ..store.control_state import ControlState
    from .control_follower import ControlFollower
    from .heartbeats import BeatCall
    from .leasing import LeaseCall
    from .site_calls import SiteCalls
    from .thread_messages import Totals
    from .write_stream import WriteStream

logger = logging.getLogger(__name__)

#: the reads of a turn: the control state's and the shared settings' (None: not due)
Reads = tuple["Answer[ControlState] | None", "Answer[SharedSettings] | None"]


@dataclass(frozen=True)
class FlushCall:
    """A batch of writes added to a round trip, until its answer is applied."""

    answer: Answer[FlushResult]
    pushes: int  # the pushes of the batch
    returns: int  # the entries the reactor handed back that it releases


class TurnPart:
    """The turn of ``SyncWorker`` (see the module doc)."""

    store: JobStore
    config: ClusterConfig
    epoch: str
    _writes: WriteStream
    _follower: ControlFollower
    _control: str | None
    _totals: Totals
    _held: set[str]
    _releasing: set[str]
    _urgent: bool
    _sent_at: float | None
    _unstarted: dict[str, int]
    _next_heartbeat: float
    _next_lease: float
    _empty_backoff_s: float
    _away_since: float | None
    _lease_covered: int
    _starved_at: int

    def _step(self, now: float, closing: bool) -> bool:
        """One round trip of what is due (see the module doc); True if the thread should turn
        again at once (it sent writes, leased something, or has a Bloom layer to prepare)."""
        trip = self.store.round_trip()
        beat = self._beat_in(trip, now) if now >= self._next_heartbeat and not closing else None
        flush = self._flush_in(trip, now, closing)
        settling = flush.pushes if flush is not None else 0
        lease = None
        if not closing and self._lease_due(now, settling):
            lease = self._lease_in(trip, settling, flush.returns if flush is not None else 0)
        reading = not closing and self._away_since is None
        reads = self._reads_in(trip, now) if reading else None
        sites = self._site_calls_in(trip, closing)
        counts = self._closespider_in(trip, now, leaving=closing) if reading or closing else None
        took_s = self._send(trip)
        self._site_calls_answered(sites, took_s)
        if beat is not None:
            self._beat_answered(beat, took_s)
        if reads is not None:
            self._reads_answered(reads, now)
        settled = flush is not None and self._flush_answered(flush)
        busy = flush is not None
        if lease is not None:
            busy = self._lease_answered(lease, took_s, settled) or busy
        if not closing and self._turned_idle():
            self._beat(now)  # the job may be finished now: say so without waiting an interval
        return self._finish_step(now, closing, counts) or busy

    def _finish_step(self, now: float, closing: bool,
                     counts: Answer[ClusterCounts] | None) -> bool:
        """The end of ``_step``: the next Bloom layer ahead of need (one chunk per step; True
        if there is more to prepare), then the CloseSpider answer (last: its error leaves the
        others applied)."""
        busy = False
        if not closing:
            busy = self.store.prepare_bloom(self.epoch)
        if counts is not None:
            self._closespider_answered(counts, now)
        return busy

    def _reads_in(self, trip: RoundTrip, now: float) -> Reads:
        """The looks at the job's control state and shared settings due, added to ``trip``."""
        return self._follower.read_in(trip, now), self._settings_in(trip)

    def _reads_answered(self, reads: Reads, now: float) -> None:
        control, shared = reads
        if control is not None:
            self._follower.answered(control, now)
            self._control = self._follower.state
        if shared is not None:
            self._settings_answered(shared)

    def _send(self, trip: RoundTrip) -> float:
        """Send ``trip``; returns how long it took."""
        started = time.monotonic()
        if len(trip):
            self._sent_at = started
        trip.send()
        return time.monotonic() - started

    def _flush_in(self, trip: RoundTrip, now: float, closing: bool) -> FlushCall | None:
        """Add the next batch to ``trip``, if one is due (None: none, or none before a lease)."""
        # a node with nothing left to crawl starves: its new work must reach Redis now; entries
        # handed back go back to the queue before the next lease (which would pass them over)
        if not self._writes.due(now, urgent=closing or self._urgent
                                or not self._prefetched_usable()) or self._results_waiting(now):
            return None
        # the engine starves for the pushes made up to when it asked: the lease that answers it
        # goes between those and later ones, as Scrapy's scheduler would have answered then
        starving = (not closing and self._lease_covered < self._starved_at
                    and self._lease_wanted())
        while True:
            call_id, batch = self._writes.batch(self._starved_at if starving else None)
            if not batch:
                return None  # the lease goes first (this step)
            self._urgent = False
            try:
                answer = self.store.flush_in(trip, self.epoch, batch, call_id)
            except BadBatch as exc:  # an op that cannot be encoded: nothing was sent
                self._set_aside(exc)
                continue
            pushes = sum(isinstance(op, Push) for op in batch)
            return FlushCall(answer, pushes, self._writes.returns_in(batch))

    def _flush_answered(self, call: FlushCall) -> bool:
        """Apply a batch's answer; True if Redis took it before the calls after it in the
        round trip (a batch sent again on its own came after them)."""
        try:
            result = call.answer.result()
        except BadBatch as exc:
            self._set_aside(exc)
            return False
        except ResultsFull as exc:  # nothing applied: the batch goes again, as it is, later
            self._results_refused(exc)
            return False
        self._results_room()
        settled = self._writes.confirmed()
        self._held.difference_update(settled)
        self._releasing.difference_update(settled)
        if result.pushed:
            self._next_lease = 0.0
            self._empty_backoff_s = 0.0
        totals = self._totals
        self._totals = dataclasses.replace(
            totals, pushed=totals.pushed + result.pushed,
            filtered=totals.filtered + result.filtered, released=totals.released + result.released)
        return not call.answer.late

    def _set_aside(self, exc: BadBatch) -> None:
        """Find the op Redis refused by halving the batch; dead-letter it, keep the order."""
        op = self._writes.refused()
        if op is None:
            return
        self._totals = dataclasses.replace(self._totals, set_aside=self._totals.set_aside + 1)
        self._releasing.discard(op.settles or "")
        logger.error(
            "clustersync: Redis refused a write of job %r (%s); it is moved to the job's dead "
            "letters (`clustersync dead %s`) and the crawl goes on. Write: %s",
            self.config.job, exc, self.config.job, op.describe(),
        )
        self._writes.set_aside(op, str(exc))

    if TYPE_CHECKING:  # provided by SyncWorker, HeartbeatPart and LeasingPart
        def _beat_in(self, trip: RoundTrip, now: float,
                     leaving: bool = False) -> BeatCall | None: ...

        def _beat_answered(self, call: BeatCall, took_s: float) -> None: ...

        def _beat(self, now: float, leaving: bool = False) -> None: ...

        def _lease_due(self, now: float, settling: int = 0) -> bool: ...

        def _lease_wanted(self) -> bool: ...

        def _prefetched_usable(self) -> int: ...

        def _lease_in(self, trip: RoundTrip, settling: int = 0,
                      returning: int = 0) -> LeaseCall: ...

        def _lease_answered(self, call: LeaseCall, took_s: float,
                            settled: bool = False) -> bool: ...

        def _turned_idle(self) -> bool: ...

        def _results_waiting(self, now: float) -> bool: ...

        def _results_refused(self, exc: ResultsFull) -> None: ...

        def _results_room(self) -> None: ...

        def _settings_in(self, trip: RoundTrip) -> Answer[SharedSettings] | None: ...

        def _settings_answered(self, answer: Answer[SharedSettings]) -> None: ...

        def _site_calls_in(self, trip: RoundTrip,
                           closing: bool = False) -> SiteCalls | None: ...

        def _site_calls_answered(self, calls: SiteCalls | None, took_s: float) -> None: ...

        def _closespider_in(self, trip: RoundTrip, now: float,
                            leaving: bool = False) -> Answer[ClusterCounts] | None: ...

        def _closespider_answered(self, answer: Answer[ClusterCounts], now: float) -> None: ...
