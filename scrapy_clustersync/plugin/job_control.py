"""JobControl: a node applies ``clustersync pause|resume|stop`` (the job's control state).

The node's Redis thread follows the state in Redis (node/control_follower.py) and hands it
to the reactor; this extension acts on it there, each time the thread handed something over
(``RedisThread.listen``), with no timer of its own:

- paused: the Redis thread leases nothing new (it holds leasing itself); the scheduler hands
  out nothing (``allows_downloads``); what the node holds stays leased and renewed; requests
  under way finish; the node stays open (the job is not finished while paused: heartbeat.lua).
- running again: leasing goes on and the engine is woken.
- stopping (or stopped): the node closes with reason ``clustersync_stopped`` (a failure
  reason: exit code 1, see stop_reasons.py). Scrapy lets the requests under way finish before the
  scheduler closes; the scheduler hands back what the node had not started.

Each change is logged once, in one line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro

from ..store.control_state import PAUSED, RUNNING, STOPPED, STOPPING
from .signals import node_opened
from .stop_reasons import JOB_STOPPED

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from .cluster_scheduler import ClusterScheduler

logger = logging.getLogger(__name__)


class JobControl:
    """Applies the job's control state to this node (see the module doc)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.node: ClusterScheduler | None = None
        #: the state this node last applied
        self.applied = RUNNING
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.node_opened, signal=node_opened)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        return ext

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler
        if scheduler.io is not None:
            scheduler.io.listen(self.check)

    def spider_opened(self) -> None:
        self.check()  # a stop found before the spider was open is applied now

    def check(self) -> None:
        """Apply the state the node follows, if it changed since it was last applied."""
        node = self.node
        if node is None or node.io is None or self._closing:
            return
        state = node.io.control
        if state is None or state == self.applied:
            return
        before, self.applied = self.applied, state
        job = node.config.job
        if state == PAUSED:
            logger.warning(
                "clustersync: job %r is paused (`clustersync pause`): this node starts no new "
                "download until `clustersync resume %s`; requests under way finish, its leases "
                "are kept", job, job)
        elif state == RUNNING:
            logger.info("clustersync: job %r %s: this node crawls again", job,
                        "resumed" if before == PAUSED else "runs again")
            node.wake_engine()
        elif state in (STOPPING, STOPPED):
            self._stop(node, job)

    def _stop(self, node: ClusterScheduler, job: str) -> None:
        """Close with ``clustersync_stopped``, or with Scrapy's reason when a CLOSESPIDER_*
        limit of the cluster stopped the job (``closespider_pagecount`` ...: not a failure):
        Scrapy finishes what is under way first. An engine without an open spider yet is
        closed when it opens (``spider_opened``)."""
        engine = self.crawler.engine
        if engine is None or engine.spider is None:
            self.applied = RUNNING  # not applied yet: the next check tries again
            return
        self._closing = True
        reason = (node.io.stop_reason if node.io is not None else "") or JOB_STOPPED
        if reason != JOB_STOPPED:
            logger.info(
                "clustersync: job %r reached its limit for the cluster (%s): this node finishes "
                "the requests under way, hands the rest back to the queue and closes", job,
                reason)
        else:
            logger.error(
                "clustersync: job %r was stopped (`clustersync stop`): this node finishes the "
                "requests under way, hands the rest back to the queue and closes; the queue is "
                "kept: `clustersync resume %s` and a new `scrapy crawl` continue it", job, job)
        deferred_from_coro(engine.close_spider_async(reason=reason))
