"""What a node tells the cluster about itself in every heartbeat."""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

#: the window of the node's pages/min: long enough to smooth bursts, short enough to follow
#: a slowdown
RATE_WINDOW_S = 60.0


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
        #: (monotonic time, pages) at each snapshot of the last RATE_WINDOW_S, oldest first
        self._samples: deque[tuple[float, int]] = deque()

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready record; called from the Redis thread, so it only reads."""
        stats = self.stats
        pages = int(stats.get_value("response_received_count", 0)) if stats else 0
        with self.process.oneshot():
            rss = self.process.memory_info().rss
            cpu = self.process.cpu_percent(None)
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "spider": self.spider_name,
            "started": self.started,
            "updated": time.time(),
            "pages": pages,
            "pages_per_min": self._pages_per_min(pages),
            "items": stats.get_value("item_scraped_count", 0) if stats else 0,
            # requests that could not travel, crawled here only (scheduler.py _keep_here)
            "unserializable": stats.get_value("scheduler/unserializable", 0) if stats else 0,
            "inflight": self.inflight(),
            "rss_bytes": rss,
            "cpu_percent": cpu,
            "runs_start": self.runs_start,
        }

    def _pages_per_min(self, pages: int) -> float:
        """Pages per minute over the last RATE_WINDOW_S (or since the first snapshot), from
        this node's own monotonic clock: ``clustersync status`` sums it over live nodes."""
        now = time.monotonic()
        samples = self._samples
        samples.append((now, pages))
        # keep one sample at or before the window's start, so the window is full once it can be
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_S:
            samples.popleft()
        first_at, first_pages = samples[0]
        elapsed = now - first_at
        return round((pages - first_pages) / elapsed * 60, 1) if elapsed > 0 else 0.0
