"""NodeLifecycle: keeps a node open while the cluster has work and closes every node together.

A node whose engine is idle does not close on its own: it tells the cluster it is idle and waits.
The job is finished when the queue is empty, no lease is out and every live node has been idle
for ``CLUSTERSYNC_IDLE_CLOSE_AFTER`` seconds (Redis server time); then every node closes with
reason ``finished``. A node whose job vanished from Redis closes with
``clustersync_state_lost``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import CloseSpider, DontCloseSpider
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.task import LoopingCall

from ..signals import node_opened

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from ..scheduler import ClusterScheduler

CHECK_INTERVAL_S = 0.25


class NodeLifecycle:
    """Asks the node (``ClusterScheduler.check``) every ``CHECK_INTERVAL_S`` whether it must
    close, and answers Scrapy's ``spider_idle`` for it."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.node: ClusterScheduler | None = None
        self._loop = LoopingCall(self._check)
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.node_opened, signal=node_opened)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler

    def spider_opened(self) -> None:
        self._loop.start(CHECK_INTERVAL_S, now=False)

    def spider_closed(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def spider_idle(self) -> None:
        """Keep an idle node open until the job is finished (or gone from Redis)."""
        if self.node is None:
            return
        self.node.engine_idle()
        outcome = self.node.outcome
        if outcome is None:
            raise DontCloseSpider
        if outcome != "finished":
            raise CloseSpider(outcome)  # not "finished": the job is gone, not done

    def _check(self) -> None:
        if self.node is None or self._closing:
            return
        outcome = self.node.check()
        if outcome is not None:
            self._close(outcome)

    def _close(self, reason: str) -> None:
        self._closing = True
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason=reason))
