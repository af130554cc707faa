"""NodeLifecycle: keeps a node open while the cluster has work and closes every node together.

A node whose engine is idle does not close on its own: it tells the cluster it is idle and waits.
The job is finished when the queue is empty, no lease is out and every live node has been idle
for ``CLUSTERSYNC_IDLE_CLOSE_AFTER`` seconds (Redis server time); then every node closes with
reason ``finished``. A node whose job vanished from Redis closes with
``clustersync_state_lost``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import CloseSpider, DontCloseSpider
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.task import LoopingCall

from ..scheduler import scheduler_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

CHECK_INTERVAL_S = 0.25
STATE_LOST = "clustersync_state_lost"


class NodeLifecycle:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._loop = LoopingCall(self._check)
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self) -> None:
        self._loop.start(CHECK_INTERVAL_S, now=False)

    def spider_closed(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def spider_idle(self) -> None:
        scheduler = scheduler_for(self.crawler)
        if scheduler is None or scheduler.worker is None:
            return
        scheduler.engine_idle()
        if scheduler.worker.state_lost:
            raise CloseSpider(STATE_LOST)  # not "finished": the job is gone, not done
        if not scheduler.worker.finished:
            raise DontCloseSpider

    def _check(self) -> None:
        scheduler = scheduler_for(self.crawler)
        if scheduler is None or scheduler.worker is None or self._closing:
            return
        scheduler.publish_counts()
        worker = scheduler.worker
        worker.reactor_tick = time.monotonic()  # the reactor is not stuck (see SyncWorker)
        if worker.state_lost:
            self._close(STATE_LOST)
        elif worker.finished:
            self._close("finished")
        elif scheduler.start is not None and scheduler.start.needs_run():
            deferred_from_coro(scheduler.start.run())
        elif worker.prefetched:
            scheduler.wake_engine()

    def _close(self, reason: str) -> None:
        self._closing = True
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason=reason))
