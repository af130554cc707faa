"""What a node tells the cluster about itself in every heartbeat."""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from .config import ClusterConfig
    from .scheduler import ClusterScheduler


class NodeInfo:
    def __init__(self, crawler: Crawler, config: ClusterConfig, scheduler: ClusterScheduler):
        self.crawler = crawler
        self.config = config
        self.scheduler = scheduler
        self.process = psutil.Process(os.getpid())
        self.process.cpu_percent(None)
        self.started = time.time()

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready record; called from the Redis thread, so it only reads."""
        stats = self.crawler.stats
        get = stats.get_value if stats is not None else (lambda *_: 0)
        worker = self.scheduler.worker
        with self.process.oneshot():
            rss = self.process.memory_info().rss
            cpu = self.process.cpu_percent(None)
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "spider": self.crawler.spider.name if self.crawler.spider else None,
            "started": self.started,
            "updated": time.time(),
            "pages": get("response_received_count", 0),
            "items": get("item_scraped_count", 0),
            "inflight": len(self.scheduler.inflight),
            "prefetched": len(worker.prefetched) if worker else 0,
            "buffered": worker.backlog if worker else 0,
            "rss_bytes": rss,
            "cpu_percent": cpu,
            "runs_start": self.scheduler.runs_start,
        }
