"""One owner for every piece of state: no field of the node is written by two threads.

Every class of ``scrapy_clustersync.node`` and ``scrapy_clustersync.plugin`` has its
``__setattr__`` patched to record which thread assigned which attribute of which object. A small
crawl then runs on a real node: the scheduler on this thread (standing for the reactor, running
what the Redis thread hands it with ``callFromThread``) and the real Redis thread over an
in-memory Redis, through a pause and a resume and the job's end. No (object, attribute) may
be assigned by two threads; an object's construction (its ``__init__``, before any other
thread can see it) does not count.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from scrapy import Request
from scrapy.http import HtmlResponse

import scrapy_clustersync.node
import scrapy_clustersync.plugin
from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.redis_thread import Link, open_redis_thread
from scrapy_clustersync.node.spool import Spool
from scrapy_clustersync.plugin.cluster_dupefilter import ClusterDupeFilter
from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler
from scrapy_clustersync.plugin.job_control import JobControl
from scrapy_clustersync.plugin.node_lifecycle import NodeLifecycle
from scrapy_clustersync.store import JobStore

from .node_fakes import fake_engine, make_crawler
from .thread_harness import ManualReactor

PAGES = 20
#: the assignments seen: (object id, class, attribute) -> names of the threads that made them
Writes = dict[tuple[int, str, str], set[str]]


def _classes() -> Iterator[type]:
    """The mutable classes defined in node/ and plugin/ (frozen dataclasses cannot be assigned)."""
    for package in (scrapy_clustersync.node, scrapy_clustersync.plugin):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                frozen = is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
                if cls.__module__ == module.__name__ and not frozen and "__setattr__" not in vars(
                        cls) and not issubclass(cls, (BaseException, tuple)):
                    yield cls


def _constructing(obj: object) -> bool:
    """``obj``'s ``__init__`` is running: no other thread can know it yet."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is obj:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    seen: Writes = defaultdict(set)
    alive: list[object] = []  # keeps every object recorded, so that no id is reused

    def recording(self: object, name: str, value: Any) -> None:
        if not _constructing(self):
            alive.append(self)
            seen[(id(self), type(self).__name__, name)].add(threading.current_thread().name)
        object.__setattr__(self, name, value)

    for cls in set(_classes()):
        monkeypatch.setattr(cls, "__setattr__", recording, raising=False)
    return seen


def _site(url: str) -> list[str]:
    """Page n links to pages 2n+1 and 2n+2, up to PAGES pages."""
    number = int(url.rsplit("/", 1)[1])
    return [f"http://site/{child}" for child in (2 * number + 1, 2 * number + 2)
            if child < PAGES]


def _node(tmp_path: Path, reactor: ManualReactor) -> tuple[ClusterScheduler, JobStore]:
    """A scheduler on a real Redis thread over an in-memory Redis, its extensions listening."""
    crawler = make_crawler(CLUSTERSYNC_HEARTBEAT_INTERVAL="0.1", CLUSTERSYNC_LEASE_TIMEOUT="60",
                           CLUSTERSYNC_IDLE_CLOSE_AFTER="0.2", CLUSTERSYNC_BATCH_SIZE="5",
                           CLUSTERSYNC_PREFETCH="4")
    assert crawler.spider is not None and crawler.request_fingerprinter is not None
    config = ClusterConfig.from_settings(crawler.settings, crawler.spider.name)
    store = JobStore(fakeredis.FakeRedis(), config.job, config.node_id)

    def real_thread(store: JobStore, config: ClusterConfig, opening: Callable[[], Any],
                    node_info: Callable[[], dict[str, Any]], on_leased: Callable[[], None],
                    ) -> Link:
        return open_redis_thread(store, config, opening, node_info, on_leased,
                                 post=reactor.call_from_thread)

    scheduler = ClusterScheduler(
        crawler, config, store, RequestCodec(crawler.spider, config.max_request_bytes),
        ClusterDupeFilter(crawler.request_fingerprinter, Counter(), config.local_seen_cache),
        Spool(tmp_path / "spool", config.job), redis_thread=real_thread)
    for extension in (JobControl, NodeLifecycle):
        extension.from_crawler(crawler)
    fake_engine(scheduler).spider = crawler.spider
    opened: list[object] = []
    open_done = scheduler.open(crawler.spider)
    assert open_done is not None
    open_done.addCallback(opened.append)
    _run_until(reactor, lambda: bool(opened), lambda: None)
    return scheduler, store


def _run_until(reactor: ManualReactor, condition: Callable[[], bool], step: Callable[[], None],
               timeout_s: float = 8) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        reactor.run()
        step()
        time.sleep(0.002)


def test_no_field_of_a_node_is_written_by_two_threads(writes: Writes, tmp_path: Path) -> None:
    # given a node on its real Redis thread, with the start request of a 20-page site
    reactor = ManualReactor()
    scheduler, store = _node(tmp_path, reactor)
    engine = fake_engine(scheduler)
    crawled: list[str] = []
    scheduler.enqueue_request(Request("http://site/0"))
    assert scheduler.io is not None
    scheduler.io.start_done()

    def crawl_one() -> None:
        request = scheduler.next_request()
        if request is None:
            scheduler.engine_idle()
            return
        crawled.append(request.url)
        done = engine.scraper.enqueue_scrape(HtmlResponse(request.url), request)
        for url in _site(request.url):
            scheduler.enqueue_request(Request(url))
        done.callback(None)

    # when it crawls half the site, is paused, resumed, and crawls on until the job ends
    _run_until(reactor, lambda: len(crawled) >= PAGES // 2, crawl_one)
    store.set_control("pause")
    _run_until(reactor, lambda: scheduler.io is not None and scheduler.io.control == "paused",
               lambda: None)
    paused_at = len(crawled)
    crawl_one()
    store.set_control("resume")
    _run_until(reactor, lambda: scheduler.outcome == "finished", crawl_one, timeout_s=15)
    closed: list[object] = []
    close = scheduler.close("finished")
    assert close is not None
    close.addCallback(closed.append)
    _run_until(reactor, lambda: bool(closed), lambda: None)
    # then every page was crawled once (none while paused), and no attribute of any object of
    # the node was assigned by both threads
    assert sorted(crawled) == sorted(f"http://site/{n}" for n in range(PAGES))
    assert len(crawled) > paused_at
    shared = {key: threads for key, threads in writes.items() if len(threads) > 1}
    assert shared == {}, f"written by two threads: {sorted(shared)}"
    # and the check saw both threads at work, so it cannot pass for want of looking
    by_thread = {thread for threads in writes.values() for thread in threads}
    assert by_thread == {"MainThread", "clustersync-io"}
    redis_side = {cls for (_, cls, _), threads in writes.items() if "clustersync-io" in threads}
    assert {"SyncWorker", "WriteStream", "ControlFollower"} <= redis_side
