"""StartRun: the job's start() on this node, run once per job and never lost.

One node per job claims start() when it joins and runs it; the others wait (crawling from the
shared queue meanwhile). The job cannot finish before start() is done ("S" in Redis), so:
- start() is done only when its iteration is over, every request it yielded was handed to the
  engine (``ClusterSpiderMiddleware`` is the spider middleware nearest the engine, and the
  engine crawls each request before it asks for the next) and every item it yielded is through
  the item pipelines (Scrapy sends those without waiting, so they are counted here);
- a start() that raises is done too, as in Scrapy, which then closes with ``start_error``;
- any live node whose heartbeat finds the claiming node gone before start() was done takes the
  claim over and runs start() (through the spider middlewares, as Scrapy does);
- if Redis came back older than the end of a start() that ran here (or than its beginning,
  while it ran), this node runs it again: its requests may be among the lost writes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..config import ClusterConfig
    from .thread_api import RedisThread

logger = logging.getLogger(__name__)

#: how often a node waiting for another's start() checks whether its crawl is stopping (the
#: start state itself wakes it at once: every hand-over of the Redis thread does)
STOPPING_CHECK_S = 1.0


class StartRun:
    """The job's start() on this node: whether it runs here and when it is done."""

    def __init__(self, crawler: Crawler, config: ClusterConfig, io: RedisThread,
                 claimed: bool) -> None:
        self.crawler = crawler
        self.config = config
        self.io = io
        self.claimed = claimed  # this node claimed start() when it joined
        #: "pending" (the engine has not asked for start() yet), "waiting" (another node runs
        #: it), "running" (this node runs it, or waits for its items), "idle"
        self.phase = "pending"
        self.ran = False  # this node exhausted start() at least once
        self._began_at = 0  # io.rollbacks when this node's latest run began
        self._iterated = False
        self._items = 0  # items start() yielded that are not through the pipelines yet
        self._rerun = False  # the next process_start() call is a run again
        self._must_rerun = False
        self._changed = Waiters()  # fired whenever the Redis thread hands something over
        io.listen(self._changed.fire)

    # ---- called by ClusterSpiderMiddleware.process_start ---------------------------------
    async def begin(self) -> bool:
        """True if this node must iterate start() now; False if another node ran it."""
        if self._rerun or self.claimed and self.phase == "pending":
            self._rerun = False
            self._running()
            return True
        self.phase = "waiting"
        if await self._wait_for_claim():
            logger.warning(
                "clustersync: the node that ran start() of job %r stopped before start() was "
                "exhausted; node %s runs it now (requests it yields that are already queued "
                "or seen are dropped by dedup, except dont_filter=True ones)",
                self.config.job, self.config.node_id,
            )
            self._running()
            return True
        self.phase = "idle"
        return False

    def yielded(self, item_or_request: Any) -> None:
        if not isinstance(item_or_request, Request):
            if not self._items:
                self._watch_items(True)
            self._items += 1

    def ended(self) -> None:
        """The iteration is over (exhausted, or start() raised): done once its items are."""
        self._iterated = True
        self._maybe_done()

    # ---- polled by the lifecycle extension -------------------------------------------------
    def needs_run(self) -> bool:
        """This node must run start() (again): a claim taken over, or an end Redis lost."""
        if self.phase != "idle":
            return False
        start = self.io.start_state  # one read: a heartbeat may replace it meanwhile
        state, seen_at = start.state, start.rollbacks
        if self._must_rerun:
            return True
        if state == "mine":
            return not self.ran or seen_at > self._began_at
        return state == "none" and self.ran and seen_at > self._began_at

    async def run(self) -> None:
        """Run start() through the spider middlewares, its output straight to the engine."""
        self._rerun, self._must_rerun = True, False
        self.phase = "running"
        if self.ran:
            logger.warning("clustersync: node %s runs start() again for job %r: Redis lost "
                           "the end of it", self.config.node_id, self.config.job)
        else:
            logger.warning("clustersync: node %s runs start() of job %r: it took the claim "
                           "over from a node that is gone", self.config.node_id, self.config.job)
        engine: Any = self.crawler.engine
        start = await engine.scraper.spidermw.process_start()
        async for item_or_request in start:
            if engine.spider is None:
                return
            if isinstance(item_or_request, Request):
                engine.crawl(item_or_request)
            else:
                await engine.scraper.start_itemproc_async(item_or_request, response=None)

    # ---- internals -----------------------------------------------------------------------
    def _running(self) -> None:
        self.phase = "running"
        self._began_at = self.io.rollbacks
        self._iterated = False

    async def _wait_for_claim(self) -> bool:
        from scrapy.utils.defer import maybe_deferred_to_future

        while self.io.start_state.state == "other" and not self._stopping():
            await maybe_deferred_to_future(self._changed.wait(STOPPING_CHECK_S))
        return self.io.start_state.state == "mine" and not self._stopping()

    def _stopping(self) -> bool:
        return self.io.outcome is not None or self.crawler.crawling is False

    def _watch_items(self, on: bool) -> None:
        """Listen to the end of every item while an item start() yielded is in the pipelines,
        and only then: under the asyncio reactor a signal receiver costs every item of every
        page a task of its own."""
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            if on:
                self.crawler.signals.connect(self._item_done, signal=signal)
            else:
                self.crawler.signals.disconnect(self._item_done, signal=signal)

    def _item_done(self, item: Any, response: Any = None, **kwargs: Any) -> None:
        if response is None and self._items > 0:  # an item start() yielded (Scrapy passes None)
            self._items -= 1
            if not self._items:
                self._watch_items(False)
            self._maybe_done()

    def _maybe_done(self) -> None:
        if self.phase != "running" or not self._iterated or self._items:
            return
        self.phase = "idle"
        if self.io.rollbacks != self._began_at:
            self._must_rerun = True  # Redis came back older while it ran: some of it is gone
            return
        self.ran = True
        self.io.start_done()
        logger.info("clustersync: start() of job %r is exhausted on node %s; the cluster crawls "
                    "on from the shared queue", self.config.job, self.config.node_id)


class Waiters:
    """Deferreds that fire together (``fire``), each after ``timeout_s`` at most: start()
    waits on one after a request it yielded while the node starves (see
    ``ClusterScheduler.own_requests_sent``)."""

    def __init__(self) -> None:
        self._waiting: list[Deferred[None]] = []

    def wait(self, timeout_s: float) -> Deferred[None]:
        from twisted.internet import reactor

        clock: Any = reactor
        waiter: Deferred[None] = Deferred()
        self._waiting.append(waiter)
        timeout = clock.callLater(timeout_s, self.fire)
        return waiter.addBoth(lambda result: _cancel(timeout, result))

    def fire(self) -> None:
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.callback(None)


def _cancel(call: Any, result: Any) -> Any:
    """Cancel ``call`` (an IDelayedCall) if it is still to run; pass ``result`` on."""
    if call.active():
        call.cancel()
    return result
