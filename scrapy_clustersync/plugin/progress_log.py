"""ClusterProgress: a progress line for the whole cluster beside Scrapy's own LogStats line.

Every ``LOGSTATS_INTERVAL`` seconds (Scrapy's setting, 60 by default; 0 turns it off) the node
logs what the cluster did: requests done per minute by all nodes, queued, leased and live nodes.
It reads the answer of the node's last heartbeat (``RedisThread.cluster``), which the Redis
thread already has: no Redis call, nothing on the reactor waits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet.task import LoopingCall

from .signals import node_opened

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from ..store.script_results import Heartbeat
    from .cluster_scheduler import ClusterScheduler

logger = logging.getLogger(__name__)


class ClusterProgress:
    """Logs the cluster's progress every ``interval_s`` (see the module doc)."""

    def __init__(self, crawler: Crawler, interval_s: float) -> None:
        self.crawler = crawler
        self.interval_s = interval_s
        self.node: ClusterScheduler | None = None
        self._last: Heartbeat | None = None
        self._loop = LoopingCall(self.log)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        interval_s = crawler.settings.getfloat("LOGSTATS_INTERVAL")
        if interval_s <= 0:
            raise NotConfigured("LOGSTATS_INTERVAL is 0")
        ext = cls(crawler, interval_s)
        crawler.signals.connect(ext.node_opened, signal=node_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler
        self._loop.start(self.interval_s, now=False)

    def spider_closed(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def log(self) -> None:
        """Log one progress line, if a heartbeat answered since the node joined."""
        io = self.node.io if self.node is not None else None
        beat = io.cluster if io is not None else None
        if beat is None:
            return
        last, self._last = self._last, beat
        minutes = (beat.server_ms - last.server_ms) / 60_000 if last is not None else 0
        rate = (beat.done - last.done) / minutes if last is not None and minutes > 0 else 0.0
        logger.info(
            "clustersync: cluster of job %r: %.0f pages/min, %d queued, %d leased, %d live "
            "node(s), %d requests done in all", self.node.config.job if self.node else "?",
            rate, beat.queued, beat.leased, beat.live_nodes, beat.done)
