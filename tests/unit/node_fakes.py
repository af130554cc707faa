"""A node's parts without Redis threads or subprocesses: a fake Redis thread, a fake engine,
and a ClusterScheduler built on them, for the unit tier."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import fakeredis
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred, succeed

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.lease_sizing import Measure
from scrapy_clustersync.node.spool import Spool
from scrapy_clustersync.node.thread_api import NodeOpened, RedisThread, StartState, Undelivered
from scrapy_clustersync.plugin.cluster_dupefilter import ClusterDupeFilter, project_dupefilter
from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler
from scrapy_clustersync.plugin.crawl_order import QueueOrder
from scrapy_clustersync.store import JobStore, Op, Push, StartDone

OpT = TypeVar("OpT")


class FakeRedisThread:
    """Records what the scheduler submits; hands out the entries a test ``lease``s to it."""

    def __init__(self, start_state: str = "none") -> None:
        self.submitted: list[Op] = []
        self.leased: deque[tuple[str, bytes]] = deque()
        self.accepting = True
        self.finished_with: str | None = None
        self.rollback_count = 0
        self.state = StartState(start_state)
        self.idle = False
        self.started = False
        self.closed_with: list[str] | None = None
        self.undeliverable: list[Op] = []  # what close() reports as not sent
        self.pushed_total = 0
        #: what the node reports of itself in each heartbeat (given to the real thread)
        self.node_info: Callable[[], dict[str, Any]] = dict
        #: what joins the job, given by the scheduler (run by open())
        self.opening: Callable[[], NodeOpened | str] = lambda: NodeOpened("epoch", False)
        self.flushed = 0  # how many submitted ops Redis has applied (see flush())
        self.lease_wanted = 0  # want_lease() calls
        self.settled: list[float] = []  # settle_lease() calls, with their timeouts
        #: the job's control state, as the real thread hands it over
        self.control: str | None = "running"
        #: the close reason a CLOSESPIDER_* limit stopped the job with, and page tickets granted
        self.stop_reason = ""
        self.tickets = 0
        self.closespider_totals = (0, 0, 0)
        #: what the cluster CloseSpider extension handed over
        self.counted_messages: list[object] = []
        self.listeners: list[Callable[[], None]] = []

    # ---- RedisThread ---------------------------------------------------------------------
    def open(self) -> Deferred[NodeOpened | str]:
        """Join the job at once (the test thread stands for the Redis thread)."""
        self.started = True
        return succeed(self.opening())

    def counted(self, message: object, wake: bool = False) -> None:
        self.counted_messages.append(message)

    def submit(self, op: Op) -> None:
        self.submitted.append(op)

    def take(self, exact: bool = False) -> tuple[str, bytes] | None:
        return self.leased.popleft() if self.leased else None

    def want_lease(self) -> None:
        self.lease_wanted += 1

    def request_started(self) -> None:
        pass

    def size_leases(self, measure: Measure) -> None:
        self.measure = measure

    def settle_lease(self, timeout_s: float) -> None:
        self.settled.append(timeout_s)

    @property
    def waiting(self) -> int:
        return len(self.leased)

    @property
    def buffered_pushes(self) -> int:
        return sum(isinstance(op, Push) for op in self.submitted[self.flushed:])

    @property
    def pushes_unleased(self) -> int:
        return self.buffered_pushes  # the fake leases nothing by itself

    @property
    def accepting_work(self) -> bool:
        return self.accepting

    def mark_busy(self) -> None:
        self.idle = False

    def mark_idle(self) -> None:
        self.idle = True

    @property
    def allows_downloads(self) -> bool:
        return self.control == "running"

    def listen(self, callback: Callable[[], None]) -> None:
        self.listeners.append(callback)

    @property
    def outcome(self) -> str | None:
        return self.finished_with

    @property
    def rollbacks(self) -> int:
        return self.rollback_count

    @property
    def start_state(self) -> StartState:
        return self.state

    def start_done(self) -> None:
        self.submit(StartDone())
        self.state = StartState("done", self.rollback_count)

    cluster = None
    finish_note = "queue empty (fake)"

    def totals(self) -> dict[str, int]:
        return {"pushed": self.pushed_total, "filtered": 0, "released": 0, "set_aside": 0}

    @property
    def shared_settings(self) -> Any:
        """None: the scheduler's tests read no shared settings."""
        return None

    def want_turns(self, ask: Any) -> None:
        """No politeness calls: the scheduler's tests have no site turns to reserve."""

    def slow_down(self, site: str, retry_after_s: float | None, delay_s: float) -> None:
        """No politeness calls (see ``want_turns``)."""

    def listen_turns(self, callback: Any) -> None:
        """No politeness calls (see ``want_turns``)."""

    def listen_slowed(self, callback: Any) -> None:
        """No politeness calls (see ``want_turns``)."""

    def close(self, unacked: list[str]) -> Deferred[Undelivered]:
        self.closed_with = unacked
        return succeed(Undelivered(None, list(self.undeliverable), 0))

    # ---- for the tests -------------------------------------------------------------------
    def changed(self) -> None:
        """The thread handed something over: the listeners run, as on the reactor."""
        for listener in self.listeners:
            listener()

    def flush(self) -> None:
        """Redis applied every op submitted so far."""
        self.flushed = len(self.submitted)

    def ops(self, kind: type[OpT]) -> list[OpT]:
        """The submitted ops of one kind, in order."""
        return [op for op in self.submitted if isinstance(op, kind)]

    def kinds(self) -> list[str]:
        """The kind of every submitted op, in order: ["Push", "Ack", ...]."""
        return [type(op).__name__ for op in self.submitted]


class FakeScraper:
    """Scrapy's scraper as the scheduler sees it: ``enqueue_scrape`` gives a Deferred that the
    test fires when "the callback and everything it yielded" are done."""

    def __init__(self) -> None:
        self.scraping: dict[str, Deferred[None]] = {}

    def enqueue_scrape(self, result: Any, request: Request, *args: Any) -> Deferred[None]:
        done: Deferred[None] = Deferred()
        self.scraping[request.url] = done
        return done

    def handle_spider_error(self, failure: Any, request: Request, *args: Any) -> None:
        pass


class FakeNextCall:
    """The engine's CallLaterOnce: counts how often the engine was woken."""

    def __init__(self) -> None:
        self.scheduled = 0

    def schedule(self) -> None:
        self.scheduled += 1


class FakeSlot:
    def __init__(self) -> None:
        self.nextcall = FakeNextCall()
        self.scheduler: object = None  # the scheduler the engine drives (make_scheduler's)


class FakeEngine:
    def __init__(self) -> None:
        self.scraper = FakeScraper()
        self.spider: Spider | None = None
        self.closed_with: str | None = None
        self._slot = FakeSlot()
        #: what Scrapy's own idle test says: nothing downloading, scraping or left in start()
        self.nothing_in_progress = True

    def spider_is_idle(self) -> bool:
        return self.nothing_in_progress

    async def close_spider_async(self, reason: str) -> None:
        self.closed_with = reason

    @property
    def woken(self) -> int:
        """How often the engine was asked to run its loop (and so its idle test) now."""
        return self._slot.nextcall.scheduled


class ListingSpider(Spider):
    name = "listing"

    def parse(self, response: Any) -> None:
        pass


def make_crawler(**settings: Any) -> Crawler:
    from twisted.internet import reactor  # noqa: F401  (a crawl has one: coroutines start on it)

    crawler = get_crawler(ListingSpider, {"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0",
                                          **settings})
    crawler.spider = crawler._create_spider()
    crawler.engine = FakeEngine()  # type: ignore[assignment]
    return crawler


def make_scheduler(
    tmp_path: Path, thread: FakeRedisThread | None = None, **settings: Any
) -> tuple[ClusterScheduler, FakeRedisThread]:
    """A ClusterScheduler of a fresh job in an in-memory Redis, opened on ``thread``, with the
    ``DUPEFILTER_CLASS`` of ``settings`` as ``from_crawler`` builds it."""
    crawler = make_crawler(**settings)
    assert crawler.spider is not None and crawler.request_fingerprinter is not None
    config = ClusterConfig.from_settings(crawler.settings, crawler.spider.name)
    store = JobStore(fakeredis.FakeRedis(), config.job, config.node_id)
    fake = thread or FakeRedisThread()

    def built(store: JobStore, config: ClusterConfig, opening: Callable[[], NodeOpened | str],
              node_info: Callable[[], dict[str, Any]], on_leased: Callable[[], None],
              ) -> RedisThread:
        fake.node_info = node_info
        fake.opening = opening
        return fake

    cluster = ClusterDupeFilter(crawler.request_fingerprinter, Counter(), config.local_seen_cache,
                                debug=crawler.settings.getbool("DUPEFILTER_DEBUG"))
    scheduler = ClusterScheduler(
        crawler, config, store,
        RequestCodec(crawler.spider, config.max_request_bytes),
        cluster,
        Spool(tmp_path / "spool", config.job),
        redis_thread=built,
        df=project_dupefilter(crawler, cluster),
        order=QueueOrder.from_settings(crawler.settings),
    )
    fake_engine(scheduler)._slot.scheduler = scheduler
    scheduler.open(crawler.spider)
    return scheduler, fake


def fake_engine(scheduler: ClusterScheduler) -> FakeEngine:
    engine = scheduler.crawler.engine
    assert isinstance(engine, FakeEngine)
    return engine
