"""DownloadGate: a request waits for its site's turn *before* Scrapy's download slot queue, so
that ``clustersync pause`` and ``stop`` hold it there too.

Scrapy's downloader puts every request it is handed into its site's slot queue (up to
``CONCURRENT_REQUESTS`` of them) and starts one per ``DOWNLOAD_DELAY``: a pause that only
stops the scheduler still lets that queue drain for many seconds. This downloader middleware,
which the add-on installs at ``ORDER`` (after the middlewares that may answer or drop a request
before it is sent, robots.txt among them, and before ``DownloaderStats`` and the HTTP cache),
lets a request go on only when its slot can start it at once:

- the job runs (not paused; the node follows the control state, job_control.py);
- the slot has a free transfer slot, nothing queued, no request of the gate on its way to it;
- the site's turn has come (``SiteTurns``, site_turns.py: today Scrapy's own delay);
- with ``CLOSESPIDER_PAGECOUNT``, the node holds a page ticket (cluster_closespider.py).

The fast path (job running, slot free, no delay due) returns None at once: no Deferred, nothing
scheduled. Otherwise the request is held (held_requests.py), in priority then arrival order,
and goes on when a transfer ends, its delay passes or the job runs again (the engine awaits
the held request's own future on asyncio, else a coroutine awaiting its Deferred). A held
request is a download under way for the engine (it is in ``Downloader.active``): it counts
against ``CONCURRENT_REQUESTS``, and the engine is not idle while it waits, so neither the node
nor the job can be found idle or finished meanwhile.

On ``stop`` (or when the node closes while the job does not run, e.g. SIGTERM while paused) a
held request that holds a lease is not downloaded: its lease is released (it goes back to the
job's queue, as the entries the node had not started do at close) and the gate answers the
engine with the request itself; the engine hands it to ``crawl()``, where the gate's
``request_scheduled`` handler drops it with ``IgnoreRequest`` (not logged, not counted, never
pushed again). A held request without a lease (a direct ``engine.download_async``, or a request
kept on this node because it cannot travel) goes on in its site's turn instead: handing it back
would loop, or lose it.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from time import monotonic
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from twisted.internet.defer import Deferred

from ..codec import LEASE_META_KEY
from ..store.control_state import STOPPED, STOPPING
from .cluster_closespider import ClusterCloseSpider
from .crawler_parts import started_part
from .held_requests import HeldRequests
from .signals import node_opened
from .site_summary import report_sites
from .site_turns import LocalTurns, SiteTurns, longest_delay_s, site_turns_for

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.core.downloader import Downloader, Slot
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.base import DelayedCall
    from typing_extensions import Self

    from .cluster_scheduler import ClusterScheduler

logger = logging.getLogger(__name__)

#: after ProxyMiddleware (750), before DownloaderStats (850) and HttpCacheMiddleware (900)
ORDER = 845
#: how soon to look again at a slot that holds a queued request the gate did not let through
QUEUED_RECHECK_S = 0.1
#: how soon to look again for a request let through that left without reaching its slot
EN_ROUTE_RECHECK_S = 1.0


class DownloadGate:
    """The gate before the download slots (see the module doc). ``turns`` decides each site's
    pace (``LocalTurns``: Scrapy's delay)."""

    def __init__(self, crawler: Crawler, turns: SiteTurns | None = None) -> None:
        self.crawler = crawler
        self.turns: SiteTurns = turns or LocalTurns()
        self.node: ClusterScheduler | None = None
        self.held = HeldRequests()
        #: requests let through and not in their slot yet -> (their slot, its lastseen then)
        self._en_route: dict[Request, tuple[str, float | None]] = {}
        self._en_route_per_slot: Counter[str] = Counter()
        #: per slot, requests Scrapy started but has not put on the wire yet (``Slot.transferring``
        #: takes them a turn of the reactor later: until then their slot looks free)
        self._starting: dict[str, set[Request]] = {}
        #: requests handed back, on their way to the engine's crawl() (dropped there)
        self._handed_back: set[Request] = set()
        self._closing = False
        self._timer: DelayedCall | None = None
        self._timer_due = math.inf
        self._downloader: Downloader | None = None
        #: the cluster's page tickets (CLOSESPIDER_PAGECOUNT), if that extension runs
        self.tickets: ClusterCloseSpider | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        gate = cls(crawler, site_turns_for(crawler.settings))
        crawler.signals.connect(gate.node_opened, signal=node_opened)
        crawler.signals.connect(gate._reached_slot, signal=signals.request_reached_downloader)
        crawler.signals.connect(gate._left_downloader, signal=signals.request_left_downloader)
        return gate

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler
        scheduler.gate_tells_starts = True  # from _reached_slot: one receiver, not two
        if scheduler.io is not None:
            scheduler.io.listen(self.wake)
            bind = getattr(self.turns, "bind", None)
            if bind is not None:  # ClusterTurns: its turns come from the node's Redis thread
                bind(scheduler.io, self.wake, lambda key: self.held.per_slot.get(key, 0))
            report_sites(self.turns, scheduler)
        self._watch_close(started_part(self.crawler, "engine"))
        extensions = getattr(getattr(self.crawler, "extensions", None), "middlewares", ())
        self.tickets = next((ext for ext in extensions if isinstance(ext, ClusterCloseSpider)),
                            None)

    # ---- the downloader middleware ---------------------------------------------------------
    def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        """None if ``request`` may go on now (nothing else is done: the fast path); else an
        awaitable that ends when it may (None), or with the request itself when it is handed
        back to the job's queue (see the module doc)."""
        downloader = self._downloader or self._get_downloader()
        key = downloader.get_slot_key(request)
        if self.held.waiting or not self._runs():
            return self._hold(request, key)
        slot = downloader.slots.get(key)
        now = monotonic()
        wait_s = self._wait_s(key, slot, now)
        if wait_s <= 0:
            self._let_through(request, key, slot, now)
            return None
        return self._hold(request, key, wait_s)

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        if request in self._en_route:  # answered before its slot (HTTP cache, a middleware):
            self._not_arriving(request)  # not the site's answer, which alone may slow it down
        else:
            self.turns.answered(self._key_of(request), response.status, response.headers)
        return response

    def process_exception(self, request: Request, exception: Exception,
                          spider: Spider | None = None) -> None:
        if self._en_route:
            self._not_arriving(request)
        if self.tickets is not None:  # no response: its page ticket serves another request
            self.tickets.give_back()

    # ---- holding ---------------------------------------------------------------------------
    def _hold(self, request: Request, key: str, wait_s: float | None = None) -> Any:
        """Hold ``request`` of slot ``key``. ``wait_s``: how long the request was just found
        to wait, alone at a running gate; unless a request let through was lost on its way
        since, that is all ``wake()`` would find (its timer set for that long)."""
        # behind a held request of its own site at a running gate, it cannot go before that one:
        # what lets that one through (a transfer that ends, a timer, a lost request found) wakes
        # the gate anyway, and a look now would find nothing to let through
        behind = wait_s is None and bool(self.held.per_slot.get(key)) and self._runs()
        held = self.held.add(request, key)
        self._count("clustersync/gate/held")
        if wait_s is None or self._forget_lost_en_route():
            if not behind:
                self.wake()
        else:
            self._wake_in(min(wait_s, EN_ROUTE_RECHECK_S) if self._en_route else wait_s)
        turn = held.turn
        return self._awaited(turn) if isinstance(turn, Deferred) else turn

    @staticmethod
    async def _awaited(turn: Deferred[Request | None]) -> Request | None:
        return await turn

    def wake(self) -> None:
        """Look at every held request now (a ``SiteTurns`` that learns a turn came calls it)."""
        if not self.held.waiting:
            return
        self._forget_lost_en_route()
        if not self._runs():  # a running job hands nothing back
            if self._hands_back():
                self._hand_back()
            if not self._closing:
                return  # paused (or the state is not known yet): every request waits
        soonest = self._let_through_whose_turn_came()
        if self.held.waiting and self._en_route:
            soonest = min(soonest, EN_ROUTE_RECHECK_S)
        self._wake_in(soonest)

    def _let_through_whose_turn_came(self) -> float:
        """Let through, in order, each held request its slot can start now; returns how soon
        the first one left waiting may go (inf: when woken)."""
        now = monotonic()
        blocked: set[str] = set()  # a site's requests go in their order
        soonest = math.inf
        slots = (self._downloader or self._get_downloader()).slots
        per_slot = self.held.per_slot
        for held in self.held:
            if not self._closing and self.tickets is not None and not self.tickets.available():
                break  # no page ticket left (wake() is called when tickets come)
            if held.key in blocked:
                if len(blocked) == len(per_slot):
                    break  # every site waits: no later request can go
                continue
            slot = slots.get(held.key)
            wait_s = self._wait_s(held.key, slot, now)
            if wait_s > 0:
                blocked.add(held.key)
                soonest = min(soonest, wait_s)
                continue
            self.held.remove(held)
            self._let_through(held.request, held.key, slot, now)
            held.go(None)
        return soonest

    def _wait_s(self, key: str, slot: Slot | None, now: float) -> float:
        """Seconds until a request of ``key`` may go on (0: now; inf: when woken)."""
        on_the_way = self._en_route_per_slot.get(key, 0)
        if key in self._starting:
            on_the_way += self._still_starting(key, slot)
        if slot is None:  # Scrapy makes it when the first request arrives
            return self.turns.wait_s(key, None, now) if not on_the_way else math.inf
        if slot.queue:  # a request that did not pass this gate waits there: let it go first
            return QUEUED_RECHECK_S
        if slot.free_transfer_slots() - on_the_way <= 0:
            return math.inf  # woken when a transfer ends or the one on its way arrives
        if on_the_way and slot.delay:
            return math.inf  # the one on its way takes this turn
        return self.turns.wait_s(key, slot, now)

    def _let_through(self, request: Request, key: str, slot: Slot | None, now: float) -> None:
        self._en_route[request] = (key, None if slot is None else slot.lastseen)
        self._en_route_per_slot[key] += 1
        self.turns.taken(key, now)
        if self.tickets is not None:
            self.tickets.take()

    # ---- a request let through, until it is in its slot --------------------------------------
    def _reached_slot(self, request: Request, **_: Any) -> None:
        """``request`` is about to enter its slot's queue (Scrapy's ``_enqueue_request``, which
        starts it at once when the slot allows). If its turn came at this gate and no other
        request started since, Scrapy must not wait a second, freshly drawn delay: the slot's
        last start is moved back beyond any delay it can draw (Scrapy sets it to now when it
        starts the request, in the same call)."""
        if self.node is not None:
            self.node.request_started(request)
        known = self._forget(request)
        if known is None:
            return
        key, lastseen = known
        slot_key = request.meta.get("download_slot", key)
        slot = (self._downloader or self._get_downloader()).slots.get(slot_key)
        at_once = slot is not None and self._starts(request, slot_key, slot, lastseen)
        # started at once without a delay, in the room the gate kept for it, it frees nothing a
        # held request waits for; else the gate looks again once Scrapy has started it
        if self.held.waiting and not (at_once and slot is not None and not slot.delay
                              and slot_key == key):
            self._wake_in(0.0)

    def _starts(self, request: Request, slot_key: str, slot: Slot, lastseen: float | None
                ) -> bool:
        """Whether Scrapy starts ``request``, arriving in ``slot``, at once; if so, it counts as
        on its way until it is on the wire, and a delay it waited at the gate is not drawn
        again. Scrapy draws that second delay as soon as it starts a request (its
        ``_process_queue`` looks again at once, finds the queue empty and the delay not passed,
        and sets ``slot.latercall``): with nothing queued and no start since the gate let this
        request through, that call holds nothing but this request, and is cancelled."""
        if slot.queue or slot.free_transfer_slots() <= 0:
            return False
        turn_came = bool(slot.delay) and lastseen is not None and slot.lastseen == lastseen
        if slot.latercall is not None:
            if not turn_came:
                return False
            slot.latercall.cancel()
            slot.latercall = None
        self._starting.setdefault(slot_key, set()).add(request)
        if turn_came:
            assert lastseen is not None
            slot.lastseen = min(lastseen, monotonic() - longest_delay_s(slot) - 1.0)
        return True

    def _left_downloader(self, request: Request, **_: Any) -> None:
        self.turns.done(self._key_of(request))
        if self._starting:
            starting = self._starting.get(request.meta.get("download_slot", ""))
            if starting:
                starting.discard(request)
        if self.held.waiting:
            self.wake()  # a transfer ended: its slot has room

    def _still_starting(self, key: str, slot: Slot | None) -> int:
        """How many requests of slot ``key`` Scrapy started and has not put on the wire yet."""
        starting = self._starting[key]
        if slot is not None:
            starting.difference_update(
                [each for each in starting if each in slot.transferring or each not in slot.active])
        if slot is None or not starting:
            del self._starting[key]
            return 0
        return len(starting)

    def _not_arriving(self, request: Request) -> None:
        known = self._forget(request)
        if known is not None:
            self.turns.done(known[0])  # it never reaches its slot, whose signal would say so
            if self.held.waiting:
                self._wake_in(0.0)

    def _forget(self, request: Request) -> tuple[str, float | None] | None:
        known = self._en_route.pop(request, None)
        if known is not None:
            self._en_route_per_slot[known[0]] -= 1
            if self._en_route_per_slot[known[0]] <= 0:
                del self._en_route_per_slot[known[0]]
        return known

    def _forget_lost_en_route(self) -> bool:
        """Forget requests let through that are no longer downloads at all (a later middleware
        answered them with a new request, which bypasses every ``process_response``); True if
        there was one."""
        if not self._en_route:
            return False
        active = (self._downloader or self._get_downloader()).active
        lost = [each for each in self._en_route if each not in active]
        for request in lost:
            self._forget(request)
        return bool(lost)

    # ---- stop: hand back -------------------------------------------------------------------
    def _hands_back(self) -> bool:
        io = self.node.io if self.node is not None else None
        if io is None:
            return False
        return io.control in (STOPPING, STOPPED) or (self._closing and not io.allows_downloads)

    def _hand_back(self) -> None:
        """Release the lease of every held request that has one; answer the engine with it."""
        assert self.node is not None
        leases = self.node.leases
        leased = [held for held in self.held
                  if held.request.meta.get(LEASE_META_KEY) in leases.inflight]
        if not leased:
            return
        # connected only now (every other request is scheduled without it), and before any
        # answer: without the asyncio reactor the engine gets it at once
        self.crawler.signals.connect(self._scheduled, signal=signals.request_scheduled)
        for held in leased:
            self.held.remove(held)
            leases.release(held.request.meta[LEASE_META_KEY])
            self._handed_back.add(held.request)
            held.go(held.request)
        self._count("clustersync/gate/handed_back", len(leased))
        logger.info("clustersync: %d requests waiting for their turn were not downloaded; "
                    "they went back to the job's queue", len(leased))

    def _scheduled(self, request: Request, **_: Any) -> None:
        if self._handed_back and request in self._handed_back:
            self._handed_back.discard(request)
            raise IgnoreRequest("handed back to the job's queue")

    def _watch_close(self, engine: Any) -> None:
        """Learn when the engine starts closing: a paused node that closes hands back what it
        holds (else its close would wait for a resume)."""
        close = getattr(engine, "close_spider_async", None)
        if close is None:
            return

        async def closing(*args: Any, **kwargs: Any) -> None:
            self._closing = True
            self.wake()
            await close(*args, **kwargs)

        engine.close_spider_async = closing

    # ---- internals -------------------------------------------------------------------------
    def _count(self, stat: str, count: int = 1) -> None:
        """Count in the node's hot-path counts (published with the scheduler's), or, with no
        node, in the crawler's stats."""
        if self.node is not None:
            self.node.counts[stat] += count
        else:
            self.crawler.stats.inc_value(stat, count)

    def _runs(self) -> bool:
        io = self.node.io if self.node is not None else None
        return io is None or (io.allows_downloads and (self.tickets is None
                                                      or self.tickets.available()))

    def _key_of(self, request: Request) -> str:
        """The download slot key of ``request`` (Scrapy's, as the gate let it through)."""
        key = request.meta.get("download_slot")
        if key is None:
            key = (self._downloader or self._get_downloader()).get_slot_key(request)
        return str(key)

    def _get_downloader(self) -> Downloader:
        if self._downloader is None:
            self._downloader = self.crawler.engine.downloader
        return self._downloader

    def _wake_in(self, seconds: float) -> None:
        """Call ``wake`` in ``seconds`` (or sooner, if already due sooner)."""
        if seconds == math.inf:
            return
        due = monotonic() + max(0.0, seconds)
        if self._timer is not None and self._timer.active():
            if self._timer_due <= due:
                return
            self._timer.cancel()
        from twisted.internet import reactor

        clock: Any = reactor
        self._timer_due = due
        self._timer = clock.callLater(max(0.0, seconds), self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer, self._timer_due = None, math.inf
        self.wake()
