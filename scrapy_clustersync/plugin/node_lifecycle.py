"""NodeLifecycle: keeps a node open while the cluster has work and closes every node together.

In a cluster, a node whose engine has nothing to do is not done: other nodes may still queue
work for it. So the engine is not told the spider is idle (``spider_is_idle()`` says False)
until the job is finished: the queue is empty, no lease is out, start() is done and every live
node has been idle, with nothing buffered, for ``CLUSTERSYNC_IDLE_CLOSE_AFTER`` seconds (Redis
server time; see heartbeat.lua). Then the engine is woken and Scrapy closes the spider itself,
as it would without the add-on: it sends ``spider_idle`` as often as plain Scrapy does, a
``DontCloseSpider`` keeps the node open, and the close reason is Scrapy's (``finished``,
``start_error``) or the one a ``CloseSpider`` raised by the spider or an extension gives.
A request scheduled then (by a ``spider_idle`` handler) voids "finished" on this node, which
crawls it. A node whose job vanished from Redis closes at once with ``clustersync_state_lost``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, DontCloseSpider
from scrapy.utils.defer import deferred_from_coro

from ..node.thread_api import FINISHED
from .crawler_parts import started_part
from .signals import node_opened

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from .cluster_scheduler import ClusterScheduler


class NodeLifecycle:
    """Holds back the engine's idle test until the job is finished, and looks at the node's
    ``outcome`` each time its Redis thread handed something over (``RedisThread.listen``)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.node: ClusterScheduler | None = None
        self._closing = False
        #: the engine was woken for the "finished" the node reports now (once per answer, so
        #: that a spider that keeps itself open gets spider_idle as rarely as in plain Scrapy)
        self._woken = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.node_opened, signal=node_opened)
        crawler.signals.connect(ext.spider_idle, signal=signals.spider_idle)
        return ext

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler
        if scheduler.io is not None:
            scheduler.io.listen(self.node_changed)
        engine: Any = started_part(self.crawler, "engine")  # none: a scheduler opened alone
        spider_is_idle = getattr(engine, "spider_is_idle", None)
        if spider_is_idle is not None:
            engine.spider_is_idle = self._idle_when_finished(scheduler, spider_is_idle)

    @staticmethod
    def _idle_when_finished(
        node: ClusterScheduler, spider_is_idle: Callable[[], bool]
    ) -> Callable[[], bool]:
        """The engine's idle test, true only once the job is finished (or gone).

        When the engine itself has nothing in progress the node tells its Redis thread so
        (``engine_idle``): the heartbeat reports it idle, which the job's end waits for.
        """

        def idle_when_finished() -> bool:
            if not spider_is_idle():
                return False
            node.engine_idle()
            return node.outcome is not None

        return idle_when_finished

    def spider_idle(self) -> None:
        """Scrapy found the spider idle: let it close once the job is finished (with its own
        reason or another handler's), close with the reason if the job is gone, else keep the
        node open (a request scheduled by another idle handler voided "finished")."""
        if self.node is None:
            return
        self.node.engine_idle()
        outcome = self.node.outcome
        if outcome is None:
            raise DontCloseSpider
        if outcome != FINISHED:
            raise CloseSpider(outcome)  # not "finished": the job is gone, not done

    def node_changed(self) -> None:
        """Wake the engine for a job now finished; close a node whose job is gone."""
        if self.node is None or self._closing:
            return
        outcome = self.node.outcome
        if outcome is None:
            self._woken = False
        elif outcome == FINISHED:
            self._wake_for_finish()
        else:
            self._close(outcome)

    def _wake_for_finish(self) -> None:
        """Let the engine run its idle test now: it finds the spider idle and closes it."""
        if not self._woken and self.node is not None:
            self._woken = True
            self.node.wake_engine()

    def _close(self, reason: str) -> None:
        """Close at once, busy or not: the job is gone from Redis. An engine already closing
        keeps its own reason (``close_spider_async`` then only waits)."""
        self._closing = True
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason=reason))
