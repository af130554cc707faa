"""NodeLink: the reactor's side of a node's Redis thread (``thread_api.RedisThread``).

Everything here runs on the reactor and is owned by it: the leased entries not taken yet, the
priorities of the node's recent pushes, its counts of what it did and sent, and the last
``NodeView`` the Redis thread handed over. It talks to the thread only through a ``Channel``
(ops and commands, in order) and is told back only by calls the thread schedules on the reactor
(``reactor.callFromThread``) with immutable values: ``leased``, ``view_changed``,
``drop_prefetched``, ``ping`` and ``closed``. Nothing here waits on Redis.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from ..store import Leased, Op
from ..store.control_state import RUNNING
from ..store.write_ops import Push, StartDone
from .lease_sizing import LeaseSizer, Measure
from .prefetch import Prefetch, RecentPushes
from .site_link import SiteLinkPart
from .thread_api import FINISHED, STATE_LOST, NodeOpened, StartState, Undelivered
from .thread_messages import (
    Busy,
    Close,
    Demand,
    Dropped,
    HandedBack,
    Idle,
    NodeView,
    ReactorAlive,
    Took,
    WantLease,
)

if TYPE_CHECKING:
    from ..config import ClusterConfig
    from ..store.script_results import Heartbeat

#: what the reactor may send: an op to write, or one of thread_messages' commands
Message = object


class Channel:
    """The one way from the reactor to the Redis thread: a FIFO queue and a wake-up.

    The reactor wakes the thread for ops only when the thread said it waits for some
    (``ops_wanted``: its write buffer was empty when it went to sleep) or a batch is full, so
    a burst of pushes costs one wake-up, not one per push. ``NodeLink`` puts what a turn of
    the reactor said in one list (``put_batch``).
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.wake = threading.Event()
        self.ops_wanted = threading.Event()

    def put(self, message: Message, wake: bool = False) -> None:
        self._queue.put(message)
        if wake:
            self.wake.set()

    def put_batch(self, messages: list[Message], wake: bool) -> None:
        """Queue ``messages`` (ops and commands, in order) as one; wake the thread if ``wake``
        or if it waits for ops."""
        self._queue.put(messages)
        if wake or self.ops_wanted.is_set():
            self.ops_wanted.clear()
            self.wake.set()

    def pending(self) -> bool:
        """Something waits in the queue (the Redis thread's: it does not sleep then)."""
        return not self._queue.empty()

    def drain(self) -> list[Message]:
        """Every message queued so far, in order (the Redis thread's)."""
        messages: list[Message] = []
        while True:
            try:
                messages.append(self._queue.get_nowait())
            except queue.Empty:
                return messages


class Inbox:
    """The one way from the Redis thread to the reactor: calls queued here (``put``, the Redis
    thread's) run on the reactor (``run``), which ``post`` (``reactor.callFromThread``) is asked
    to do. A scheduler driven with no reactor running (a script, a test that never starts a
    crawl) has no reactor to run them: its own thread runs them then (``NodeLink``), and may
    wait for them, since there is no reactor to hold up."""

    def __init__(self, post: Callable[..., object], reactor_running: Callable[[], bool]) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[..., object], tuple[object, ...]]] = (
            queue.SimpleQueue())
        self._post = post
        self.reactor_running = reactor_running
        #: a ``run`` is posted and has not begun: calls queued now are run by it
        self._posted = threading.Event()

    def put(self, function: Callable[..., object], *args: object) -> None:
        self._calls.put((function, args))
        if not self._posted.is_set():  # one reactor call runs every call queued before it
            self._posted.set()
            self._post(self.run)

    def run(self) -> None:
        """Run every call queued so far, in order (on the reactor's side)."""
        self._posted.clear()  # before draining: a call queued during it posts a run again
        while True:
            try:
                function, args = self._calls.get_nowait()
            except queue.Empty:
                return
            function(*args)


#: how long a scheduler driven with no reactor running waits for its Redis thread to join or
#: to leave (there is no reactor to hold up then)
NO_REACTOR_WAIT_S = 60.0


class NodeLink(SiteLinkPart):
    """The reactor's side of the node's Redis thread; see the module doc and ``RedisThread``."""

    def __init__(self, config: ClusterConfig, channel: Channel, inbox: Inbox,
                 start: Callable[[], None], on_leased: Callable[[], None],
                 start_state: str, later: Callable[[Callable[[], None]], object] | None = None,
                 ) -> None:
        self.config = config
        self._channel = channel
        self._inbox = inbox
        self._start = start
        self._on_leased = on_leased
        self._listeners: list[Callable[[], None]] = []
        self._prefetched = Prefetch()
        self._sizer = LeaseSizer(config.prefetch, config.prefetch_start,
                                 fixed=not config.prefetch_sized)
        self._woke_for_lease = False  # the thread was woken to lease; no lease came since
        self._recent = RecentPushes()
        self._view = NodeView(start_state=StartState(start_state))
        self._start_state = StartState(start_state)
        self._ops_submitted = 0
        self._later = later
        self._out: list[Message] = []  # said this turn of the reactor, not sent yet
        self._send_due = False  # a call at the end of this turn sends ``_out``
        self._pushes_submitted = 0
        #: the engine starved when the node had made this many pushes (``want_lease``): the next
        #: entry it takes is the one Scrapy's scheduler would have given it then
        self._starved_at: int | None = None
        self._activity = 0
        self._idle_sent: int | None = None  # activity last reported idle (None: busy since)
        self._idle = False
        self._closed: Deferred[Undelivered] | None = None
        self._opened: Deferred[NodeOpened | str] = Deferred()

    # ---- RedisThread: commands ---------------------------------------------------------------
    def open(self) -> Deferred[NodeOpened | str]:
        """Start the thread; it joins the job first (``joining.open_node``). The Deferred fires
        on the reactor with what the node joined as, or the reason it must stop."""
        self._start()
        self._without_reactor(self._opened)
        return self._opened

    def start(self) -> None:
        """Start the thread of a node that joined already (tests)."""
        self._start()

    def submit(self, op: Op) -> None:
        if isinstance(op, Push):
            self._pushes_submitted += 1
            self._recent.add(self._pushes_submitted, op.priority, op.flags)
        self._ops_submitted += 1
        self._say(op)

    def take(self, exact: bool = False) -> tuple[str, bytes] | None:
        handed_back: list[str] = []
        entry = self._prefetched.take(self._recent, self._view.pushes_settled, handed_back,
                                      exact, self._starved_at)
        for entry_id in handed_back:
            self._say(HandedBack(entry_id), True)
        sizer = self._sizer
        if entry is not None:
            self._starved_at = None
        if sizer.refresh(self._view.round_trip_s, handing_out=entry is not None):
            self._say(Demand(sizer.target), self._low())
        if entry is not None:
            self._say(Took(entry[0]), self._low())
        return entry

    def _low(self) -> bool:
        """The prefetch is at its low-water mark: wake the Redis thread to lease more, once
        per lease (it leases from there on its own). A target of 0 leases nothing, and a wake
        sent before it may bring no lease: the next growth wakes the thread again."""
        target = self._sizer.target
        if not target:
            self._woke_for_lease = False
        elif not self._woke_for_lease and len(self._prefetched) <= target // 2:
            self._woke_for_lease = True
            return True
        return False

    def request_started(self) -> None:
        # the downloader took one on: the target may grow now, not only when the engine asks
        if self._sizer.refresh(self._view.round_trip_s, starting=True):
            self._say(Demand(self._sizer.target), self._low())

    def size_leases(self, measure: Measure) -> None:
        self._sizer.measure = measure

    def _say(self, message: Message, wake: bool = False) -> None:
        """Queue ``message`` for the Redis thread: what one turn of the reactor says goes in
        one list, at the end of the turn, or at once to wake the thread (``wake``, a full
        batch, no reactor running)."""
        out = self._out
        out.append(message)
        if wake or len(out) >= self.config.batch_size:
            self._send(wake=True)
        elif not self._send_due:
            if self._later is None or not self._inbox.reactor_running():
                self._send(wake=False)
                return
            self._send_due = True
            self._later(self._send_at_end_of_turn)

    def _send(self, wake: bool) -> None:
        out, self._out = self._out, []
        self._channel.put_batch(out, wake)

    def _send_at_end_of_turn(self) -> None:
        self._send_due = False
        if self._out:
            self._send(wake=False)

    def want_lease(self) -> None:
        # the engine asks again while it starves: it still waits for its first answer
        starved = self._starved_at
        if starved is None or self._prefetched.covered >= starved:
            self._starved_at = self._pushes_submitted
        self._say(WantLease(self._pushes_submitted), True)

    def settle_lease(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (self.pushes_unleased and not self._prefetched and not self._view.away
               and not self._view.state_lost and time.monotonic() < deadline):
            self._inbox.run()
            time.sleep(0.002)

    def mark_busy(self) -> None:
        self._activity += 1
        self._idle = False
        if self._idle_sent is not None:
            self._idle_sent = None
            self._say(Busy(self._activity))

    def mark_idle(self) -> None:
        self._idle = True
        if self._idle_sent != self._activity:
            self._idle_sent = self._activity
            self._say(Idle(self._activity), True)

    def start_done(self) -> None:
        self.submit(StartDone())
        self._start_state = StartState("done", self._view.rollbacks)

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def close(self, unacked: list[str]) -> Deferred[Undelivered]:
        if self._closed is None:
            self._closed = Deferred()
            self._prefetched.drop_all()  # the Redis thread releases them with the rest
            self._say(Close(tuple(unacked)), True)
            self._without_reactor(self._closed)
        return self._closed

    def _without_reactor(self, answer: Deferred[Any]) -> None:
        """With no reactor running, run the Redis thread's calls here until ``answer`` came."""
        if self._inbox.reactor_running():
            return
        deadline = time.monotonic() + NO_REACTOR_WAIT_S
        while not answer.called and time.monotonic() < deadline:
            self._inbox.run()
            time.sleep(0.005)

    # ---- RedisThread: what the reactor reads -------------------------------------------------
    @property
    def waiting(self) -> int:
        return len(self._prefetched)

    @property
    def buffered_pushes(self) -> int:
        # a lease made after n pushes were in Redis says so too, whichever came first
        settled = max(self._view.pushes_settled, self._prefetched.covered)
        return self._pushes_submitted - settled

    @property
    def pushes_unleased(self) -> int:
        return self._pushes_submitted - self._prefetched.covered

    @property
    def accepting_work(self) -> bool:
        view = self._view
        backlog = view.backlog + self._ops_submitted - view.ops_received
        return backlog <= self.config.buffer_limit

    @property
    def outcome(self) -> str | None:
        """``finished`` holds only while the node has done nothing since the heartbeat that
        answered it: a request scheduled after that snapshot (a spider_idle handler's, a
        timer's) is not in Redis yet, so the node runs on and crawls it."""
        view = self._view
        if view.state_lost:
            return STATE_LOST
        finished = view.finished_at is not None and view.finished_at == self._activity
        return FINISHED if finished and self._idle else None

    @property
    def rollbacks(self) -> int:
        return self._view.rollbacks

    @property
    def start_state(self) -> StartState:
        return self._start_state

    @property
    def control(self) -> str | None:
        return self._view.control

    @property
    def allows_downloads(self) -> bool:
        return self._view.control == RUNNING

    shared_settings = property(lambda self: self._view.settings)  # see thread_api.RedisThread

    @property
    def cluster(self) -> Heartbeat | None:
        return self._view.cluster

    @property
    def finish_note(self) -> str:
        beat = self._view.cluster
        nodes = beat.live_nodes if beat is not None else 0
        return (f"queue empty, no lease out, start() done, {nodes} live node(s) idle for "
                f"{self.config.idle_close_after_s:g}s")

    def totals(self) -> dict[str, int]:
        totals = self._view.totals
        return {"pushed": totals.pushed, "filtered": totals.filtered,
                "released": totals.released, "set_aside": totals.set_aside,
                "outranked": self._prefetched.outranked}

    # ---- called on the reactor by the Redis thread (callFromThread) --------------------------
    def leased(self, entries: tuple[Leased, ...], covered: int, returned: int = 0) -> None:
        """A lease call's answer, made when Redis had the node's first ``covered`` pushes and
        ``returned`` hand-backs; wakes the engine when work arrives on an empty node."""
        if self._closed is not None:
            return  # the Redis thread releases them: it knows them as not taken
        was_empty = not self._prefetched
        self._prefetched.add(entries, covered, returned)
        self._woke_for_lease = False
        if was_empty and (entries or not self.pushes_unleased):
            self._on_leased()
        self._tell_listeners()

    def opened(self, opened: NodeOpened | str) -> None:
        if not isinstance(opened, str):
            self._start_state = StartState("mine" if opened.runs_start else "other")
            self._view = dataclasses.replace(self._view, control=opened.control,
                                             settings=opened.settings)
        self._opened.callback(opened)

    def view_changed(self, view: NodeView) -> None:
        before, self._view = self._view, view
        if view.start_state != before.start_state:
            self._start_state = view.start_state
        if before.pushes_settled < self._pushes_submitted <= view.pushes_settled:
            self._on_leased()  # the node's last pushes are in Redis: the engine may be idle now
        self._tell_listeners()

    def drop_prefetched(self) -> None:
        """The node was declared dead: its prefetched entries are queued again elsewhere."""
        self._say(Dropped(tuple(self._prefetched.drop_all())), True)

    def ping(self) -> None:
        self._say(ReactorAlive())

    def closed(self, undelivered: Undelivered) -> None:
        assert self._closed is not None
        self._closed.callback(undelivered)

    def _tell_listeners(self) -> None:
        if self._closed is None:
            for listener in self._listeners:
                listener()
