"""What a node tells the cluster about itself in every heartbeat."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector


class NodeInfo:
    """The node's own figures: host, process, pages, items, requests in flight or kept here
    because they cannot travel (``scheduler/unserializable``), resources.

    It is given what it reports (the crawler's stats, a count of requests in flight), never the
    scheduler; the Redis thread adds its own figures (prefetched, buffered, state).
    """

    def __init__(
        self,
        stats: StatsCollector | None,
        spider_name: str | None,
        runs_start: bool,
        inflight: Callable[[], int],
    ) -> None:
        self.stats = stats
        self.spider_name = spider_name
        self.runs_start = runs_start
        self.inflight = inflight
        self.process = psutil.Process(os.getpid())
        self.process.cpu_percent(None)
        self.started = time.time()

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready record; called from the Redis thread, so it only reads."""
        stats = self.stats
        with self.process.oneshot():
            rss = self.process.memory_info().rss
            cpu = self.process.cpu_percent(None)
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "spider": self.spider_name,
            "started": self.started,
            "updated": time.time(),
            "pages": stats.get_value("response_received_count", 0) if stats else 0,
            "items": stats.get_value("item_scraped_count", 0) if stats else 0,
            # requests that could not travel, crawled here only (scheduler.py _keep_here)
            "unserializable": stats.get_value("scheduler/unserializable", 0) if stats else 0,
            "inflight": self.inflight(),
            "rss_bytes": rss,
            "cpu_percent": cpu,
            "runs_start": self.runs_start,
        }
