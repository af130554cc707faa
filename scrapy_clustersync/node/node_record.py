"""What a node tells the cluster about itself in every heartbeat.

The record's fields (JSON, in the job's ``node_info`` hash; ``clustersync status`` and the CLI
read them, each as optional): node, host, ip, pid, started, updated (Unix seconds), spider,
runs_start, concurrency (CONCURRENT_REQUESTS), inflight, pages, items, errors (spider
exceptions and download errors), pages_per_min, unserializable, cpu_percent, rss_bytes,
load_avg (1, 5, 15 min), settings_version (the shared-settings version the node applies; None
until it applied one), settings_overrides (the shared keys its ``-s`` gives), versions
(clustersync, scrapy, python), digest, setting_digests and file_digests (project_digest.py),
sites (with cluster politeness: what the node sees of the sites it paces, plugin/site_summary.py;
absent until the reactor first built it). The Redis thread adds its own figures (leased,
prefetched, buffered, results_full_since: Unix seconds since the job's results stream refuses
its writes, None while it takes them) and the state (heartbeats.py ``_state``).
"""

from __future__ import annotations

import ipaddress
import os
import platform
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psutil
import scrapy

from ..redis_urls import is_cluster_url, is_sentinel_url, parse_cluster_url, parse_sentinel_url
from .project_digest import project_digests

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

#: the window of the node's pages/min: long enough to smooth bursts, short enough to follow
#: a slowdown
RATE_WINDOW_S = 60.0
#: Scrapy's stats that count errors: spider exceptions by class, download errors
SPIDER_EXCEPTIONS_PREFIX = "spider_exceptions/"
SPIDER_EXCEPTIONS_COUNT = "spider_exceptions/count"
DOWNLOAD_ERRORS = "downloader/exception_count"


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
        node_id: str = "",
        settings: BaseSettings | None = None,
        spider_cls: type | None = None,
        redis_url: str = "",
    ) -> None:
        self.stats = stats
        self.spider_name = spider_name
        self.runs_start = runs_start
        self.inflight = inflight
        self.node_id = node_id
        self.concurrency = settings.getint("CONCURRENT_REQUESTS", 16) if settings else None
        digests = project_digests(settings, spider_cls)
        #: what does not change while the node runs, computed once
        self.fixed: dict[str, Any] = {
            "node": node_id, "host": socket.gethostname(),
            "pid": os.getpid(), "spider": spider_name, "runs_start": runs_start,
            "concurrency": self.concurrency, "settings_version": None,
            "versions": versions(), "digest": digests.digest,
            "setting_digests": digests.settings, "file_digests": digests.files,
        }
        self.redis_url = redis_url
        self.process = psutil.Process(os.getpid())
        self.process.cpu_percent(None)
        self.started = time.time()
        #: the record's ``sites``: replaced whole by the reactor (site_summary.py), read here
        self.sites: dict[str, Any] | None = None
        #: (monotonic time, pages) at each snapshot of the last RATE_WINDOW_S, oldest first
        self._samples: deque[tuple[float, int]] = deque()

    def settings_applied(self, version: int, overrides: list[str]) -> None:
        """The node applies shared-settings ``version``; ``overrides``: the shared keys its
        command line (``-s``) gives, which it does not take from the job. On the reactor: the
        record's fixed part is replaced whole, never changed in place, as the Redis thread
        reads it."""
        self.fixed = {**self.fixed, "settings_version": version, "settings_overrides": overrides}

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready record; called from the Redis thread, so it only reads."""
        # one C-level copy: the reactor thread keeps changing the stats meanwhile
        stats: Mapping[str, Any] = self.stats.get_stats().copy() if self.stats else {}
        if "ip" not in self.fixed:  # here, in the Redis thread: it may ask DNS
            self.fixed["ip"] = local_ip(self.redis_url)
        pages = int(stats.get("response_received_count", 0))
        with self.process.oneshot():
            rss = self.process.memory_info().rss
            cpu = self.process.cpu_percent(None)
        sites = self.sites
        return {
            **self.fixed,
            **({} if sites is None else {"sites": sites}),
            "started": self.started,
            "updated": time.time(),
            "pages": pages,
            "pages_per_min": self._pages_per_min(pages),
            "items": stats.get("item_scraped_count", 0),
            "errors": errors_in(stats),
            # requests that could not travel, crawled here only (scheduler.py _keep_here)
            "unserializable": stats.get("scheduler/unserializable", 0),
            "inflight": self.inflight(),
            "rss_bytes": rss,
            "cpu_percent": cpu,
            "load_avg": load_avg(),
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


def errors_in(stats: Mapping[str, Any]) -> int:
    """Spider exceptions plus download errors. Scrapy counts spider exceptions in total
    (``spider_exceptions/count``) and by class; a Scrapy without the total, by class only."""
    spider = stats.get(SPIDER_EXCEPTIONS_COUNT)
    if spider is None:
        spider = sum(int(value) for name, value in stats.items()
                     if name.startswith(SPIDER_EXCEPTIONS_PREFIX) and isinstance(value, int))
    return int(spider) + int(stats.get(DOWNLOAD_ERRORS, 0))


def load_avg() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes ([0, 0, 0] where unknown)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return [0.0, 0.0, 0.0]


def versions() -> dict[str, str]:
    from .. import __version__

    return {"clustersync": __version__, "scrapy": scrapy.__version__,
            "python": platform.python_version()}


def local_ip(redis_url: str) -> str:
    """The address this machine reaches Redis from (what the other nodes would see), found
    without sending a packet; 127.0.0.1 for a Unix socket, "" if unknown."""
    if is_sentinel_url(redis_url):  # the first sentinel's address: on the way to the servers
        host, port = parse_sentinel_url(redis_url).sentinels[0]
    elif is_cluster_url(redis_url):  # the first node named: one of the cluster's
        host, port = parse_cluster_url(redis_url).nodes[0]
    else:
        parts = urlsplit(redis_url)
        if parts.scheme == "unix" or not parts.hostname:
            return "127.0.0.1" if parts.scheme == "unix" else ""
        host, port = parts.hostname, parts.port or 6379
    if host == "localhost" or _is_loopback(host):
        return "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return ""


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
