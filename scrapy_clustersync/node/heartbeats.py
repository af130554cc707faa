"""The node's heartbeat and rejoin, on its Redis thread (part of ``redis_thread.SyncWorker``).

The heartbeat renews the node's record and its leases, reports it idle or busy, and brings back
the cluster as Redis sees it (``Heartbeat``: finished or not, start() state, nodes alive). A node
another node declared dead (it stood still or was cut off) drops what it prefetched and rejoins.
The reactor answers the thread's pings (``ReactorAlive``): a reactor stuck for half a lease
stops the heartbeat, so that the node's leases run out and other nodes crawl them, as if the
node were dead.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import ClusterConfig
from ..store import JobStore
from ..store.errors import StoreError
from ..store.job_store import beat_of
from ..store.primary_note import PrimaryScript, primary_address
from ..store.round_trip import Answer, RoundTrip
from ..store.script_results import DeadNode, Heartbeat
from .liveness import heartbeat_ttl_ms
from .outages import OUTAGE_BACKOFF_MAX_S
from .thread_api import StartState

if TYPE_CHECKING:
    from .reactor_link import NodeLink
    from .write_stream import WriteStream

logger = logging.getLogger(__name__)

#: how often the thread asks the reactor whether it runs (a ping it answers on the queue)
PING_INTERVAL_S = 0.25
#: the heartbeat calls whose shortest is taken as the node's round trip (liveness.py)
BEAT_CALLS_KEPT = 5


@dataclass(frozen=True)
class BeatCall:
    """A heartbeat added to a round trip, until its answer is applied."""

    answer: Answer[Heartbeat]
    idle: bool  # it reported the node idle
    leaving: bool
    at: float  # the thread's clock when it was added


class HeartbeatPart:
    """The heartbeat, rejoin and reactor watch of ``SyncWorker`` (see the module doc)."""

    store: JobStore
    config: ClusterConfig
    epoch: str
    _node_info: Callable[[], dict[str, Any]]
    _post: Callable[..., object]
    _link: NodeLink
    _writes: WriteStream
    _held: set[str]
    _unstarted: dict[str, int]
    _node_idle: bool
    _activity: int
    _away_since: float | None
    _results_full_since: float | None
    _rollbacks: int
    _control: str | None

    def _init_heartbeats(self, start_state: str) -> None:
        self._next_heartbeat = 0.0
        self._activity_at_beat = 0
        #: ``_activity`` when a heartbeat last reported the node idle (None: it reported busy)
        self._idle_reported_at: int | None = None
        #: ``_activity`` as it was when a heartbeat answered "finished"; None while not finished
        self._finished_at: int | None = None
        #: declared_ms of the last death of this node a heartbeat told it of (0: none)
        self._death_told = 0
        self._cluster: Heartbeat | None = None
        self._start_state = StartState(start_state)
        #: the entries the reactor is asked to drop (a rejoin) until it answers: no lease before
        self._drop_asked = False
        self._reactor_seen = time.monotonic()
        self._pinged_at = 0.0
        #: the node's distance from Redis: the shortest of its last heartbeat calls (a busy
        #: moment makes one call slow, never the network fast), before the first the call
        #: before its join (liveness.py)
        self._round_trip_s = 0.0
        self._beat_calls: deque[float] = deque(maxlen=BEAT_CALLS_KEPT)
        #: the Redis primary (through Sentinel) this node last recorded in the job's meta
        self._primary_noted: str | None = None
        self._primary_script: PrimaryScript | None = None

    def _ping(self, now: float) -> None:
        """Ask the reactor to say it runs, every PING_INTERVAL_S while it answers."""
        if now - self._pinged_at >= PING_INTERVAL_S and self._pinged_at <= self._reactor_seen:
            self._pinged_at = now
            self._post(self._link.ping)

    def _beat(self, now: float, leaving: bool = False) -> None:
        """Send the heartbeat, in a round trip of its own (``_beat_in``, ``_beat_answered``)."""
        trip = self.store.round_trip()
        call = self._beat_in(trip, now, leaving)
        started = time.monotonic()
        trip.send()
        if call is not None:
            self._beat_answered(call, time.monotonic() - started)

    def _beat_in(self, trip: RoundTrip, now: float, leaving: bool = False) -> BeatCall | None:
        """Add the heartbeat to ``trip`` (None: not sent, the reactor is stuck). The next one is
        due in an interval, or sooner when the job is finished then if nothing changes (a node
        that just turned idle has settled: ``_beat_answered``)."""
        if not leaving:
            self._next_heartbeat = now + self.config.heartbeat_interval_s
            if self._reactor_stuck():
                return None
        idle = self._node_idle and self._quiet
        beat = beat_of(
            # the threshold, and a few of this node's own round trips (liveness.py)
            ttl_ms=0 if leaving else heartbeat_ttl_ms(self.config, self._round_trip_s),
            lease_ms=int(self.config.lease_timeout_s * 1000),
            info=self._node_info() | self.figures()
            | {"state": "closed" if leaving else self._state(idle)},
            idle=idle,
            idle_after_ms=int(self.config.idle_close_after_s * 1000),
            lease_ids=sorted(self._held),
            busy_since_last=self._activity != self._activity_at_beat,
            # after an outage, nodes retry up to OUTAGE_BACKOFF_MAX_S apart: none is dead for it
            grace_ms=int((OUTAGE_BACKOFF_MAX_S + self.config.heartbeat_interval_s) * 1000),
            # a gap of two heartbeats: a live node's heartbeats come one interval apart
            gap_ms=int(min(self.config.node_dead_after_s,
                           2 * self.config.heartbeat_interval_s) * 1000),
            told_ms=self._death_told,
            retention_ms=int(self.config.node_retention_s * 1000),
        )
        return BeatCall(self.store.heartbeat_in(trip, self.epoch, beat), idle, leaving, now)

    def _beat_answered(self, call: BeatCall, took_s: float) -> None:
        """Apply a heartbeat's answer; ``took_s``: its round trip's time."""
        beat = call.answer.result()
        self._beat_calls.append(took_s)
        self._round_trip_s = min(self._beat_calls)
        self._heard(beat, call.idle, call.leaving)
        if not call.leaving and beat.finish_wait_ms > 0:
            self._next_heartbeat = min(self._next_heartbeat, call.at + beat.finish_wait_ms / 1000)
        if not call.leaving:
            self._note_primary()

    def _note_primary(self) -> None:
        """Through Sentinel: record the primary this node's connections reach in the job's meta
        when it is not the one recorded last (primary.lua counts a change: a failover), and log
        a change once. Best effort: a failed call is tried again at the next heartbeat (an
        outage is met by the step's own calls)."""
        address = primary_address(self.store.client)
        if address is None or address == self._primary_noted:
            return
        if self._primary_script is None:
            self._primary_script = PrimaryScript(self.store.client, self.store.keys)
        try:
            before = self._primary_script.run(address)
        except StoreError:
            return
        self._primary_noted = address
        if before:
            logger.warning("clustersync: job %r is on the Redis primary at %s now, no longer %s "
                           "(Sentinel failed over)", self.config.job, address, before)

    def _heard(self, beat: Heartbeat, idle: bool, leaving: bool) -> None:
        for dead in beat.declared_dead:
            logger.warning(
                "clustersync: node %s sent no heartbeat for %.1fs (more than "
                "CLUSTERSYNC_NODE_DEAD_AFTER, %gs): declared dead; its %d leased requests are back "
                "in the queue", dead.node, dead.silent_ms / 1000, self.config.node_dead_after_s,
                dead.leases)
        death = beat.my_death
        if death is not None and death.declared_ms != self._death_told:
            self._death_told = death.declared_ms
            if not leaving:  # (a leaving node holds nothing more)
                self._rejoin(death, beat.server_ms)
        self._activity_at_beat = self._activity
        self._cluster = beat
        self._idle_reported_at = self._activity if idle else None
        self._start_state = StartState(beat.start, self._rollbacks)
        if not leaving:
            self._finished_at = self._activity if beat.finished and idle else None

    def _rejoin(self, death: DeadNode, now_ms: int) -> None:
        """Another node declared this one dead (it stood still or was cut off): its leases went
        back to the queue then. The reactor drops its prefetched entries (they are queued again;
        releasing those leased since changes nothing for the others; nothing is leased before
        those releases are in Redis, or a lease could take one again and its release hand it
        back while the node holds it), the requests under way finish: their acks remove them
        from the queue or from another node's lease, counted once. The heartbeat that told it
        already made the node live again."""
        self._drop_asked = True
        self._post(self._link.drop_prefetched)
        logger.warning(
            "clustersync: node %s was declared dead by node %s %.1fs ago (no heartbeat for "
            "%.1fs: the process stood still or lost its network) and %d of its leases went back "
            "to the queue; it drops its %d prefetched requests, lets the %d under way finish "
            "and rejoins the job", self.config.node_id, death.by,
            max(0, now_ms - death.declared_ms) / 1000,
            (death.silent_ms or self.config.node_dead_after_s * 1000) / 1000,
            death.leases_returned, len(self._unstarted),
            max(0, len(self._held) - len(self._unstarted)))

    def _reactor_stuck(self) -> bool:
        # stuck: a ping has waited for its answer that long. Not the time since the last answer:
        # no ping is sent while the node opens (a far node's start-up takes seconds), and the
        # first heartbeat must not be held back for that
        if self._pinged_at <= self._reactor_seen:
            return False
        stuck_s = time.monotonic() - self._pinged_at
        if stuck_s < self.config.lease_timeout_s / 2:
            return False
        self._log_once(logging.WARNING, "clustersync: this node's reactor has not run for half "
                       "a lease (a callback or pipeline that blocks?); the node stops renewing its "
                       "leases, so other nodes crawl them if it stays stuck")
        return True

    def _state(self, idle: bool) -> str:
        """The node's state in its record: starting (nothing done yet), crawling, idle, paused
        (the job is paused or stopping: it starts nothing new), disconnected (Redis away);
        "closed" is sent by a node that leaves, and ``status`` shows "dead" for a node
        declared dead."""
        if self._away_since is not None:
            return "disconnected"
        if self._control is not None and self._control != "running":
            return "paused"
        if self._results_full_since is not None:
            return "results full"
        if idle:
            return "idle"
        return "starting" if self._activity == 0 and not self._held else "crawling"

    if TYPE_CHECKING:  # provided by SyncWorker and OutagePart
        @property
        def _quiet(self) -> bool: ...

        def figures(self) -> dict[str, Any]: ...

        def _log_once(self, level: int, message: str, exc_info: bool = False) -> None: ...
