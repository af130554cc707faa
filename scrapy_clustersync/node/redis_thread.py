"""SyncWorker: the one thread that talks to Redis for a node, so the reactor never waits on it.

The reactor side (the scheduler) reaches it only through ``NodeLink`` (reactor_link.py): it
queues ops (pushes, acks, dead letters, releases) and commands, in order, and is told back by
calls this thread schedules on the reactor (``reactor.callFromThread``) with immutable values:
leased entries, the node's ``NodeView`` (outcome, cluster, start state, totals, control state)
and, at close, what could not be sent. Every field of this thread is written by it alone.

The thread flushes the ops in order, in batches (one script call each), leases new work ahead
of need, sends the heartbeat (heartbeats.py) and follows the job's control state, its pub/sub
included (control_follower.py); what is due of those in a turn goes in one round trip
(turns.py). Redis away, Redis older than it was and the job gone are
outages.py's. Two faults are not outages and are never retried as they are: a batch Redis
refuses for what it holds (a malformed op) is split until the op is found; that op goes to the
job's dead letters with the reason, the rest is applied in order.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..config import ClusterConfig
from ..plugin.stop_reasons import REDIS_UNREACHABLE
from ..store import JobStore
from .closespider_message import Counted
from .closespider_part import CloseSpiderLink, CloseSpiderPart
from .control_follower import FOLLOW_INTERVAL_S, ControlFollower
from .heartbeats import PING_INTERVAL_S, HeartbeatPart
from .leasing import LeasingPart
from .outages import OutagePart
from .reactor_link import Channel, Inbox, Message, NodeLink
from .settings_reads import SettingsPart
from .site_calls import SiteCallsPart
from .thread_api import NodeOpened, StartState, Undelivered, end_of_turn
from .thread_messages import (
    Busy,
    Close,
    Demand,
    Dropped,
    HandedBack,
    Idle,
    NodeView,
    ReactorAlive,
    SetPace,
    SlowDown,
    Took,
    Totals,
    WantLease,
    WantTurns,
)
from .turns import TurnPart
from .write_stream import FLUSH_LINGER_S, WriteStream

logger = logging.getLogger(__name__)

MIN_SLEEP_S = 0.001
MAX_SLEEP_S = 0.5
CLOSE_TIMEOUT_S = 15.0
#: the first heartbeat comes this long after the join (at most one interval)
FIRST_BEAT_AFTER_S = 0.25
#: ops taken this recently: more are on their way, and the thread is not woken for them (it
#: looks again within a linger); past it, the first op wakes it
STREAMING_S = 2 * FLUSH_LINGER_S
#: round trips a subscription's new connection takes before it listens (its handshake and the
#: SUBSCRIBE), with one to spare
SUBSCRIBE_ROUND_TRIPS = 4

#: schedules a call on the reactor from this thread (``reactor.callFromThread``)
Post = Callable[..., object]
#: joins the job, on this thread, before anything else (``joining.open_node``)
Opening = Callable[[], "NodeOpened | str"]


def open_redis_thread(
    store: JobStore, config: ClusterConfig, opening: Opening,
    node_info: Callable[[], dict[str, Any]], on_leased: Callable[[], None],
    post: Post | None = None,
) -> Link:
    """Build a node's Redis thread (not started; ``NodeLink.open`` starts it with
    ``opening``) and return its reactor side: a ``thread_api.RedisThreadFactory``. ``post``
    defaults to ``reactor.callFromThread`` (a test that gives its own runs what it posts)."""
    from twisted.internet import reactor

    def reactor_running() -> bool:
        return post is not None or bool(reactor.running)

    return SyncWorker(store, config, "", node_info, on_leased, "none",
                      post or reactor.callFromThread, opening, reactor_running,
                      later=None if post is not None else end_of_turn(reactor)).link


class Link(CloseSpiderLink, NodeLink):
    """The reactor's side of the thread: ``NodeLink`` and what the CloseSpider extension needs."""


class SyncWorker(TurnPart, HeartbeatPart, LeasingPart, OutagePart, SettingsPart,
                 SiteCallsPart, CloseSpiderPart):
    """The node's Redis thread (see the module doc); ``link`` is its reactor side."""

    def __init__(
        self, store: JobStore, config: ClusterConfig, epoch: str,
        node_info: Callable[[], dict[str, Any]], on_leased: Callable[[], None],
        start_state: str, post: Post, opening: Opening | None = None,
        reactor_running: Callable[[], bool] = lambda: True,
        later: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        self.store = store
        store.set_region(config.region)
        self.config = config
        self.epoch = epoch
        self._node_info = node_info
        inbox = Inbox(post, reactor_running)
        self._post = inbox.put
        self._opening = opening
        self._runs_start = start_state == "mine"
        self._channel = channel = Channel()
        self._thread = threading.Thread(target=self._run, name="clustersync-io", daemon=True)
        self.link = self._link = Link(config, channel, inbox, self._thread.start, on_leased,
                                      start_state, later)
        self._writes = WriteStream(config.batch_size)
        self._totals = Totals()
        self._ops_received = 0
        self._held: set[str] = set()  # lease ids of this node not settled yet
        #: of those, the ones handed to the reactor and not taken by the engine (in order), each
        #: with the pushes its lease covered
        self._unstarted: dict[str, int] = {}
        #: releases of the entries a rejoin dropped, until Redis has them: no lease before
        #: (it could take one of them again, and the release would then hand it back)
        self._releasing: set[str] = set()
        self._node_idle = False
        self._activity = 0  # the reactor's count of things the node did, as last heard
        self._urgent = False  # an entry was handed back: the next batch goes out now
        self._sent_at: float | None = None  # when the last round trip began (turns.py)
        #: when the thread last went to sleep without asking to be woken for ops (_cycle)
        self._asleep_since: float | None = None
        self._ops_came_at = -STREAMING_S  # when ops were last taken from the queue
        self._init_leasing()
        self._init_site_calls()
        self._handlers = self._message_handlers()
        self._retry_at = 0.0  # Redis away: the next try
        self._follower = ControlFollower(store.control, config.job,
                                         on_heard=channel.wake.set)
        self._control: str | None = None
        self._init_settings()
        self._told = NodeView()
        self._init_heartbeats(start_state)
        self._init_outages()
        self._init_closespider()

    # ---- the loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        if self._opening is not None and not self._open(self._opening):
            return
        while True:
            self._channel.wake.clear()  # before draining, so a wake-up during it is not lost
            close = self._receive(time.monotonic())
            if close is not None:
                self._close(close)
                return
            self._survive(self._cycle)

    def _cycle(self) -> None:
        """One turn of the loop, after the reactor's messages were applied."""
        busy = False
        now = time.monotonic()
        self._ping(now)  # during an outage too: the reactor's liveness is not Redis's
        if self._state_lost is None and (self._away_since is None or now >= self._retry_at):
            busy = self._turn(now)
        self._tell()
        # (a node whose prefetch ran low waits for its own pushes: the first op wakes it then)
        streaming = (now - self._ops_came_at < STREAMING_S
                     and self._prefetched_usable() > self._demand // 2)
        if not self._writes and not streaming:
            self._channel.ops_wanted.set()
        if not busy and not self._channel.pending() and not self._subscribe_if_free():
            now = time.monotonic()
            sleep_s = self._sleep_s(now)
            if streaming and not self._writes:
                # ops come on: not woken by the first one, the thread looks again when a
                # batch begun now would be due, and the ops found then have waited since now
                sleep_s = min(sleep_s, FLUSH_LINGER_S)
                self._asleep_since = now
            self._channel.wake.wait(sleep_s)

    def _subscribe_if_free(self) -> bool:
        """Subscribe to the job's control channel if that is due and its connection's handshake
        ends before the next call is due; True if it did. While the node holds requests (under
        way or prefetched), the writes they make may come at any moment: they may wait for the
        handshake no longer than a batch lingers anyway. The handshake is the thread's time: a
        node far from Redis that crawls without a pause does not have it, and follows the state
        by its re-reads (control_follower.py), as a node refused SUBSCRIBE does."""
        now = time.monotonic()
        handshake_s = SUBSCRIBE_ROUND_TRIPS * self._round_trip_s
        if (self._away_since is not None or self._state_lost is not None
                or not self._follower.subscription_due(now)
                or self._next_call_at(now) - now < handshake_s
                or (self._held and handshake_s > FLUSH_LINGER_S)):
            return False
        self._follower.listen(now, connect=True)
        self._control = self._follower.state
        return True

    def _open(self, opening: Opening) -> bool:
        """Join the job (and what goes with it: ``joining.open_node``); False if the node must
        stop instead (its reactor side is told why and never sends anything more)."""
        try:
            opened = opening()
        except Exception:  # a bug: the node must still open, and stop with a clear reason
            logger.exception("clustersync: unexpected error while node %s joined job %r",
                             self.config.node_id, self.config.job)
            opened = REDIS_UNREACHABLE
        if isinstance(opened, str):
            self._post(self._link.opened, opened)
            return False
        self.epoch = opened.epoch
        self._runs_start = opened.runs_start
        self._round_trip_s = opened.call_s  # the first heartbeat's allowance (liveness.py)
        self._start_state = StartState("mine" if opened.runs_start else "other")
        now = time.monotonic()
        if opened.control is not None:  # the join read it: subscribe after the first lease
            self._follower.joined(opened.control, now)
        self._settings_joined(opened.settings)
        self._follow(now)  # the control state before any lease
        # the join made the node live: its first heartbeat need not hold up its first lease
        self._next_heartbeat = now + min(FIRST_BEAT_AFTER_S, self.config.heartbeat_interval_s)
        if opened.runs_start:  # its queue is empty until start() pushes: its want_lease leases
            self._next_lease = now + FIRST_BEAT_AFTER_S
        self._post(self._link.opened, dataclasses.replace(opened, control=self._control))
        return True

    def _turn(self, now: float) -> bool:
        if self._control is None:  # never read (the join reads it): before any lease
            self._follow(now)
        elif self._away_since is None:  # (its re-read is in the step's round trip)
            self._follower.listen(now, connect=False)  # (``_subscribe_if_free`` subscribes)
            self._control = self._follower.state
            self._hand_on_sites_slowed()  # before this turn's round trip
        busy = bool(self._guard(lambda: self._step(now, closing=False)))
        if self._away_since is not None:
            self._retry_at = time.monotonic() + self._outage_backoff_s()
        return busy

    def _sleep_s(self, now: float) -> float:
        """Until the next thing due: a heartbeat, a lingering batch, a lease retry, a look at
        the control channel, a ping, the next try while Redis is away."""
        # the next ping, unless the last one is unanswered (the reactor answers it when it runs)
        ping = self._pinged_at + PING_INTERVAL_S if self._pinged_at <= self._reactor_seen else None
        if self._state_lost is not None:
            return MAX_SLEEP_S
        if self._away_since is not None:
            return max(MIN_SLEEP_S, min(self._retry_at, ping or self._retry_at) - now)
        due = [self._next_call_at(now), now + FOLLOW_INTERVAL_S, *([ping] if ping else [])]
        return min(MAX_SLEEP_S, max(MIN_SLEEP_S, min(due) - now))

    def _next_call_at(self, now: float) -> float:
        """When the next call to Redis is due: a heartbeat, a lingering batch, a lease."""
        due = [self._next_heartbeat]
        linger = self._writes.linger_until(now)
        if linger is not None:
            due.append(linger)
        if self._lease_wanted():
            due.append(self._next_lease)
        return min(due)

    def _follow(self, now: float) -> None:
        self._follower.follow(now)
        self._control = self._follower.state

    def _tell(self) -> None:
        """Hand the reactor the node as it is now, if anything it sees changed. Ops taken from
        the queue and not sent yet change nothing it sees: it reckons its backlog as the ops
        it queued less those taken, plus those taken and not sent (``accepting_work``), and an
        op taken moves from one to the other. Unless the difference moved (ops were sent or
        released), the view keeps the counts it last told, so it is not sent for that alone."""
        told = self._told
        ops_received, backlog = self._ops_received, len(self._writes)
        if backlog - ops_received == told.backlog - told.ops_received:
            ops_received, backlog = told.ops_received, told.backlog
        view = NodeView(
            ops_received=ops_received, backlog=backlog,
            pushes_settled=self._writes.pushes_settled, totals=self._totals,
            rollbacks=self._rollbacks, start_state=self._start_state, cluster=self._cluster,
            finished_at=self._finished_at, state_lost=self._state_lost is not None,
            away=self._away_since is not None, control=self._control,
            round_trip_s=self._round_trip_told, settings=self._shared,
            stop_reason=self._follower.reason or self._cs_counts.stop_reason,
            tickets=self._cs_granted, closespider_totals=self._cs_totals())
        if view != told:
            self._told = view
            self._post(self._link.view_changed, view)

    # ---- what the reactor said ---------------------------------------------------------------
    def _receive(self, now: float) -> Close | None:
        """Apply every message the reactor queued (one by one, or in lists: ``NodeLink``
        sends them in batches); returns the node's Close, if it came."""
        # an op queued while a round trip was under way has waited since it began, at most: its
        # batch lingers from then (far from Redis, that wait is already longer than a linger)
        queued_at = min(now, self._sent_at or now, self._asleep_since or now)
        self._sent_at = self._asleep_since = None
        received = self._ops_received
        for message in self._channel.drain():
            for one in message if type(message) is list else (message,):
                if type(one) is Close:
                    return one
                try:
                    self._apply(one, now, queued_at)
                except Exception as exc:  # a bug: the next ones still apply
                    self._report_bug(exc)
        if self._ops_received != received:
            self._ops_came_at = now
        return None

    def _apply(self, message: Message, now: float, queued_at: float) -> None:
        handler = self._handlers.get(type(message))
        if handler is None:
            self._writes.add(message, queued_at)  # type: ignore[arg-type]
            self._ops_received += 1
        else:
            handler(message, now)

    def _message_handlers(self) -> dict[type, Callable[[Any, float], None]]:
        def took(message: Took, now: float) -> None:
            self._unstarted.pop(message.entry_id, None)

        def activity(message: Busy | Idle, now: float) -> None:
            self._node_idle = type(message) is Idle
            self._activity = message.activity

        def alive(message: ReactorAlive, now: float) -> None:
            self._reactor_seen = now

        def handed_back(message: HandedBack, now: float) -> None:
            self._unstarted.pop(message.entry_id, None)
            self._writes.hand_back(message.entry_id)
            self._urgent = True

        def demand(message: Demand, now: float) -> None:
            self._demand = message.target

        return {Took: took, Busy: activity, Idle: activity, ReactorAlive: alive,
                HandedBack: handed_back, Demand: demand,
                WantTurns: self._want_turns, SlowDown: self._slow_down,
                SetPace: lambda message, now: self.store.set_lease_pace(message.pace),
                Counted: lambda message, now: self._counted(message),
                WantLease: lambda message, now: self._lease_wanted_after(message.pushes),
                Dropped: lambda message, now: self._dropped(message.entry_ids)}

    def _dropped(self, entry_ids: tuple[str, ...]) -> None:
        """The reactor dropped what it held (a rejoin): release it, and every entry handed over
        since, before leasing again."""
        dropped = [*entry_ids, *(e for e in self._unstarted if e not in entry_ids)]
        self._unstarted.clear()
        self._releasing.update(dropped)
        self._writes.release(dropped)
        self._drop_asked = False

    # ---- writes and leases -------------------------------------------------------------------
    def _turned_idle(self) -> bool:
        """Idle and quiet, and no heartbeat said so since the node last did something."""
        return self._node_idle and self._quiet and self._idle_reported_at != self._activity

    @property
    def _quiet(self) -> bool:
        """Nothing buffered, prefetched or held: the node owes Redis nothing."""
        return not (self._writes or self._unstarted or self._held)

    def figures(self) -> dict[str, Any]:
        """What the node record shows of this thread (see node_record.py): leases held (under
        way or prefetched), prefetched, writes buffered."""
        return {"leased": len(self._held), "prefetched": len(self._unstarted),
                "buffered": len(self._writes), "runs_start": self._runs_start,
                "results_full_since": self._results_full_since}

    # ---- close -------------------------------------------------------------------------------
    def _close(self, close: Close) -> None:
        """Leave the job (``_leave``), then hand the reactor what could not be sent: always,
        a bug on the way too, or the node would wait for this answer for ever."""
        try:
            undelivered = self._leave(close)
        except Exception:
            logger.exception("clustersync: unexpected error while node %s left job %r",
                             self.config.node_id, self.config.job)
            undelivered = self._writes.undelivered(self.store.writes_seen or 0)
        self._post(self._link.closed, undelivered)

    def _leave(self, close: Close) -> Undelivered:
        """Release what the node holds, flush (CLOSE_TIMEOUT_S at most), leave the job and
        settle a stop; returns what could not be sent."""
        if self._state_lost is None and self._away_since is not None:
            # Redis may be back before the next try was due: one look, rather than spool what
            # it could take now (only a node started in this directory would send the spool)
            self._guard(self.store.ping)
        reachable = self._state_lost is None and self._away_since is None
        if reachable and self._pending_lease is not None:
            self._guard(self._lease)  # learn what a call whose answer was lost leased
        prefetched = list(self._unstarted)
        self._writes.release(prefetched)
        self._writes.release(close.unacked)
        writes = len(self._writes)
        if reachable:
            self._guard(lambda: self._step(time.monotonic(), closing=True))  # counts, tickets
            self._flush_and_leave()
            self._follower.settle()
        self._follower.close()
        undelivered = dataclasses.replace(self._writes.undelivered(self.store.writes_seen or 0),
                                          results_full=self._results_full_since is not None)
        logger.info(
            "clustersync: node %s leaves job %r: %d leased requests handed back to the queue "
            "(%d under way, %d prefetched), %d writes sent, %d kept for later",
            self.config.node_id, self.config.job, len(close.unacked) + len(prefetched),
            len(close.unacked), len(prefetched), writes - len(undelivered), len(undelivered))
        return undelivered

    def _flush_and_leave(self) -> None:
        """Send every buffered write (for CLOSE_TIMEOUT_S at most), then leave the job."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while self._writes and time.monotonic() < deadline and not self._state_lost:
            if not self._guard(lambda: self._step(time.monotonic(), closing=True)):
                time.sleep(0.2)
        if not self._writes and not self._state_lost:
            self._guard(lambda: self._beat(time.monotonic(), leaving=True))


__all__ = ["CLOSE_TIMEOUT_S", "SyncWorker", "Undelivered", "open_redis_thread"]
