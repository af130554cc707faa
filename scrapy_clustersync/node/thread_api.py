"""What the reactor side of a node may ask of the node's Redis thread (``redis_thread.SyncWorker``).

The scheduler is given a ``RedisThread`` (or a factory of one) and never sees more of it, so
a unit test can hand it a fake. The real one is ``reactor_link.NodeLink``: it lives on the
reactor, queues what it is given for the thread and keeps what the thread handed back (as
immutable values, through ``reactor.callFromThread``); nothing on the reactor side reads the
thread's state directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from scrapy.utils.asyncio import is_asyncio_available

from ..store import Op
from .lease_sizing import Measure

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from ..config import ClusterConfig
    from ..store import JobStore
    from ..store.script_results import Heartbeat
    from ..store.shared_settings import SharedSettings
    from ..store.site_scripts import TurnsAsk
    from .closespider_message import Counted

def end_of_turn(reactor: Any) -> Callable[[Callable[[], None]], object]:
    """What calls a function on ``reactor`` once its current turn is over: asyncio's
    ``call_soon`` on the asyncio reactor (looked up at the first call, when the reactor is
    installed), else ``callLater(0)``, which does the same through a timer of its own."""
    loop: list[asyncio.AbstractEventLoop | None] = []

    def later(call: Callable[[], None]) -> object:
        if not loop:
            loop.append(asyncio.get_event_loop() if is_asyncio_available() else None)
        running = loop[0]
        return running.call_soon(call) if running is not None else reactor.callLater(0, call)

    return later


#: the reasons a node closes with when its Redis thread says so (see ``RedisThread.outcome``)
FINISHED = "finished"
STATE_LOST = "clustersync_state_lost"


@dataclass(frozen=True)
class Undelivered:
    """What a closing node could not send: the batch in doubt (with its call id) and the rest."""

    pending: tuple[str, Sequence[Op]] | None = None
    ops: Sequence[Op] = field(default_factory=list)
    #: the node's write counter as Redis last confirmed it (checked again on replay)
    writes_seen: int = 0
    #: why they were not sent: Redis refused them, its results stream being full (else it
    #: was unreachable, or the job was lost)
    results_full: bool = False

    def __bool__(self) -> bool:
        return bool(self.pending or self.ops)

    def __len__(self) -> int:
        return len(self.ops) + (len(self.pending[1]) if self.pending else 0)


@dataclass(frozen=True)
class ReservedTurns:
    """Turns of one site reserved for this node: ``starts`` on the node's ``time.monotonic()``
    (with their in-flight ``tokens``, "" without a cap), ``step_s`` the site's delay in force
    for the cluster, ``retry_at`` when to ask again if none came (the cap is full, or Redis
    refused the call; None: ask when needed), ``blocked_until`` when the site's block (a
    Retry-After) ends (None: not blocked)."""

    starts: tuple[float, ...]
    tokens: tuple[str, ...]
    step_s: float = 0.0
    backoff_s: float = 0.0
    retry_at: float | None = None
    blocked_until: float | None = None


class RedisThread(Protocol):
    """What the reactor side of a node (the scheduler) may ask of the node's Redis thread.

    Every method is called from the reactor thread and returns at once: none waits on Redis.
    ``reactor_link.NodeLink`` is the real one; unit tests hand the scheduler a fake.
    """

    def open(self) -> Deferred[NodeOpened | str]:
        """Start the thread, which joins the job first (``joining.open_node``: the join, the
        checks of Redis, the spool replay); fires on the reactor with what the node joined as,
        or the reason it must stop (then the thread has ended)."""

    def submit(self, op: Op) -> None:
        """Buffer ``op``; ops reach Redis in the order they were submitted."""

    def take(self, exact: bool = False) -> tuple[str, bytes] | None:
        """The next leased entry (entry id, encoded request), or None if none is waiting.
        ``exact``: the engine downloads nothing (it waits for a lease anyway), so an entry
        that a later push of the node comes before in the queue's order within a priority is
        handed back too, not only one a higher priority outranks (``prefetch.py``)."""

    def request_started(self) -> None:
        """A request went on to the downloader (Scrapy's ``request_reached_downloader``, once
        the download gate let it through): the rate a sized lease follows, and a moment to size
        it again (what the node holds for later changed)."""

    def size_leases(self, measure: Measure) -> None:
        """Size the prefetch from what ``measure`` says the node's downloader holds and can
        take (lease_sizing.py); with ``CLUSTERSYNC_PREFETCH`` fixed, that many ahead, less
        what the downloader holds and has not started."""

    def want_lease(self) -> None:
        """Lease as soon as every push submitted so far is in Redis (the engine starves for
        them); the lease that comes back wakes the engine (``on_leased``)."""

    def settle_lease(self, timeout_s: float) -> None:
        """For a scheduler no engine drives (a caller that cannot be woken, as Scrapy's own
        scheduler tests call it): wait, taking the thread's hand-overs on this thread, until a
        lease after every push submitted so far came back (or ``timeout_s``, or Redis is away).
        Never called in a crawl."""

    @property
    def waiting(self) -> int:
        """How many leased entries wait to be taken."""

    @property
    def buffered_pushes(self) -> int:
        """How many submitted pushes Redis has not applied yet (the node's requests in transit)."""

    @property
    def pushes_unleased(self) -> int:
        """How many submitted pushes no lease has come back after yet (in Redis or not): a
        request of the node's own may still be on its way to it."""

    @property
    def accepting_work(self) -> bool:
        """False while too many writes wait for Redis: the node takes no new work then."""

    def mark_busy(self) -> None:
        """The node did something: it is not idle, and its idle time starts again."""

    def mark_idle(self) -> None:
        """The engine has nothing in progress."""

    @property
    def control(self) -> str | None:
        """The job's control state (running, paused, stopping, stopped) as the Redis thread
        last found it, None before it first did. While the job does not run the thread leases
        nothing new; what the node holds is kept, and its leases renewed."""

    @property
    def allows_downloads(self) -> bool:
        """True while the job runs (``control`` is running)."""

    @property
    def stop_reason(self) -> str:
        """The close reason a CLOSESPIDER_* limit stopped the job with ("": none)."""

    @property
    def tickets(self) -> int:
        """Page tickets granted to this node so far (CLOSESPIDER_PAGECOUNT: a request goes to
        a site only with one)."""

    @property
    def closespider_totals(self) -> tuple[int, int, int]:
        """The job's responses, items and errors as the last CloseSpider call answered."""

    def counted(self, message: Counted, wake: bool = False) -> None:
        """Hand the Redis thread what the cluster CloseSpider extension counted (``wake``: at
        once rather than at the thread's next turn)."""

    @property
    def shared_settings(self) -> SharedSettings | None:
        """The job's shared settings as the Redis thread last read them (the join reads them
        first), None before it could; a new version is there within a second of its change."""

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the reactor whenever the thread handed over something new
        (leases, outcome, cluster, start state, control state, totals)."""

    @property
    def outcome(self) -> str | None:
        """None while the node should run on; else why it ends: ``finished`` (the job is, and
        the node did nothing since the heartbeat that said so) or ``clustersync_state_lost``."""

    @property
    def rollbacks(self) -> int:
        """How many times Redis was found older than this node saw it."""

    @property
    def start_state(self) -> StartState:
        """The job's start() as the last heartbeat found it."""

    def start_done(self) -> None:
        """start() is exhausted on this node: record it in Redis."""

    @property
    def cluster(self) -> Heartbeat | None:
        """The last heartbeat's answer (queued, leased, live nodes, requests done, server time),
        or None before the first: what the progress line shows, at no extra Redis call."""

    @property
    def finish_note(self) -> str:
        """Why the job finished, as the heartbeat that said so found it (for the log)."""

    def totals(self) -> dict[str, int]:
        """What Redis did with this node's writes so far (pushed, filtered, released, ...), and
        how many leased entries were handed back untaken, outranked by a higher priority."""

    def want_turns(self, ask: TurnsAsk) -> None:
        """Reserve turns of a site for this node (site_link.py); ``listen_turns`` hears."""

    def slow_down(self, site: str, retry_after_s: float | None, delay_s: float) -> None:
        """A site answered 429/503: slow it down for the whole cluster (site_link.py)."""

    def listen_turns(self, callback: Callable[[str, ReservedTurns], None]) -> None:
        """Call ``callback(site, turns)`` on the reactor with each reservation's answer."""

    def close(self, unacked: list[str]) -> Deferred[Undelivered]:
        """Release ``unacked`` leases and what was not handed out, flush everything, leave the
        job, settle a stop; the Deferred fires (on the reactor) with what is left."""


@dataclass(frozen=True)
class NodeOpened:
    """A node that joined its job: the job's epoch, whether this node runs start(), and how
    many writes it replayed from the spool of nodes that stopped during an outage."""

    epoch: str
    runs_start: bool
    spool_replayed: int = 0
    #: the job's control state as read right after the join (None: it could not be read)
    control: str | None = None
    #: how long the node's call before its join took: its distance from Redis (liveness.py)
    call_s: float = 0.0
    #: the job's shared settings as read right after the join (None: they could not be read)
    settings: SharedSettings | None = None


@dataclass(frozen=True)
class StartState:
    """The job's start(), as a heartbeat found it.

    ``state``: "done", "mine" (this node holds the claim), "other" or "none" (see
    heartbeat.lua); ``rollbacks``: the Redis thread's rollback count when it was found.
    """

    state: str
    rollbacks: int = 0


#: Builds a node's Redis thread (``redis_thread.open_redis_thread`` is one), from: the job's
#: store, the node's config, what joins the job on that thread before anything else
#: (``joining.open_node``), what the node reports of itself in each heartbeat (called on the
#: thread), and what to call (on the reactor) when work arrives on an empty node.
RedisThreadFactory: TypeAlias = Callable[
    ["JobStore", "ClusterConfig", Callable[[], "NodeOpened | str"], Callable[[], dict[str, Any]],
     Callable[[], None]],
    RedisThread,
]
