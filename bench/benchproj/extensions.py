"""Bench-only extensions, enabled through the settings modules of this project."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from twisted.internet.task import LoopingCall

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

IDLE_POLL_S = 0.1


class StatsToJson:
    """Writes the crawl's final stats to ``BENCH_STATS_PATH`` as JSON once the engine stops."""

    def __init__(self, crawler: Crawler, path: Path) -> None:
        self.crawler = crawler
        self.path = path

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        path = crawler.settings.get("BENCH_STATS_PATH")
        if not path:
            raise NotConfigured("BENCH_STATS_PATH is not set")
        ext = cls(crawler, Path(path))
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def engine_stopped(self) -> None:
        assert self.crawler.stats is not None
        stats: dict[str, Any] = dict(self.crawler.stats.get_stats())
        self.path.write_text(json.dumps(stats, default=str, sort_keys=True, indent=1))


class IdleClose:
    """Keeps a node open until it has been idle ``BENCH_IDLE_CLOSE_AFTER`` seconds in a row.

    What RedisSpider's ``MAX_IDLE_TIME_BEFORE_CLOSE`` does, for a plain spider on scrapy-redis's
    scheduler. While idle it also asks the engine for work every ``IDLE_POLL_S`` instead of
    Scrapy's 5 s heartbeat, so a node that starts before the queue is seeded joins at once:
    this favours scrapy-redis, never hurts it.
    """

    def __init__(self, crawler: Crawler, idle_close_after_s: float) -> None:
        self.crawler = crawler
        self.idle_close_after_s = idle_close_after_s
        self.idle_since: float | None = None
        self._poll = LoopingCall(self._nudge)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler, crawler.settings.getfloat("BENCH_IDLE_CLOSE_AFTER", 1.0))
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self) -> None:
        self._poll.start(IDLE_POLL_S, now=False)

    def spider_closed(self) -> None:
        if self._poll.running:
            self._poll.stop()

    def response_received(self) -> None:
        self.idle_since = None

    def spider_idle(self) -> None:
        now = time.monotonic()
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < self.idle_close_after_s:
            raise DontCloseSpider

    def _nudge(self) -> None:
        slot: Any = getattr(self.crawler.engine, "_slot", None)
        if self.idle_since is not None and slot is not None:
            slot.nextcall.schedule()


class ThreadNames:
    """Gives every Python thread of the node its name at the OS level too (Linux, first 15
    characters), so that a sampler outside the process (bench/node_cpu.py) can tell the
    reactor's thread from the Redis thread in ``/proc/PID/task/TID/comm``. On with
    ``BENCH_THREAD_NAMES = True``; it names new threads once a second."""

    def __init__(self) -> None:
        import ctypes
        import ctypes.util

        self._setname = ctypes.CDLL(ctypes.util.find_library("pthread") or None).pthread_setname_np
        self._setname.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
        self._named: set[int] = set()
        self._poll = LoopingCall(self._name_threads)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("BENCH_THREAD_NAMES"):
            raise NotConfigured("BENCH_THREAD_NAMES is not set")
        ext = cls()
        crawler.signals.connect(ext.engine_started, signal=signals.engine_started)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def engine_started(self) -> None:
        self._poll.start(1.0, now=True)

    def engine_stopped(self) -> None:
        if self._poll.running:
            self._poll.stop()

    def _name_threads(self) -> None:
        import threading

        for thread in threading.enumerate():
            if thread.ident is not None and thread.ident not in self._named:
                self._named.add(thread.ident)
                name = "main" if thread is threading.main_thread() else thread.name
                self._setname(thread.ident, name.encode()[:15])
