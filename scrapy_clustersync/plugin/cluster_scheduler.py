"""ClusterScheduler: Scrapy's scheduler replaced by the job's shared, crash-safe queue in Redis.

Requests are leased, not popped: a request handed to this node stays in Redis, under a lease
that the node's heartbeat renews, until it is acked. A node that dies stops renewing; its
leases expire (Redis server time) and go back to the queue. When a leased request is done
(acked) is ``leases.LeaseTracker``'s to say.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from scrapy import Request, signals
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred, maybeDeferred

from ..codec import RequestCodec, UndecodableEntry, UnencodableRequest
from ..config import ClusterConfig, redact_url
from ..node.joining import open_node
from ..node.node_record import NodeInfo
from ..node.redis_thread import open_redis_thread
from ..node.spool import Spool
from ..node.start_run import StartRun, Waiters
from ..node.thread_api import (
    FINISHED,
    NodeOpened,
    RedisThread,
    RedisThreadFactory,
    Undelivered,
)
from ..store import JobStore
from ..store.write_ops import DeadLetterEntry, PushFlags
from .cluster_dupefilter import ClusterDupeFilter, NodeDedup
from .crawl_order import QueueOrder
from .crawler_parts import engine_drives, started_part, wake_engine
from .lease_demand import DownloaderDemand
from .lease_tracker import LeaseTracker
from .local_requests import LocalRequests
from .published_counts import PublishedCounts
from .request_tasks import TASK_META_KEY, filtered_here, push_of
from .result_collector import ResultCollector, open_results
from .scheduler_parts import scheduler_parts
from .signals import node_opened
from .stats_sender import StatsSender
from .stop_reasons import StopWhenOpened

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: how long next_request() of a scheduler no engine drives waits for its own new requests to
#: come back leased (see next_request); a crawl's engine is woken instead, never waits
NO_ENGINE_WAIT_S = 1.0


class ClusterScheduler:
    """Scrapy's scheduler interface over the job's shared queue (see the module doc).

    ``redis_thread`` builds the node's Redis thread (``open_redis_thread`` by default), which
    joins the job and then does every Redis call of the node: the scheduler reaches Redis only
    through it (``store`` is handed to it). A unit test hands it a fake.

    ``df`` is the project's ``DUPEFILTER_CLASS`` (``dupefilter.project_dupefilter``), exposed
    as Scrapy's scheduler exposes it; ``dupefilter`` (the default ``df``) is the cluster's.
    """

    def __init__(
        self,
        crawler: Crawler,
        config: ClusterConfig,
        store: JobStore,
        codec: RequestCodec,
        dupefilter: ClusterDupeFilter,
        spool: Spool,
        redis_thread: RedisThreadFactory = open_redis_thread,
        df: BaseDupeFilter | None = None,
        order: QueueOrder | None = None,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.store = store
        self.codec = codec
        self.dupefilter = dupefilter
        #: whether a request is a duplicate on this node (``df``, then ``dupefilter``)
        self.dedup = NodeDedup(crawler, dupefilter, dupefilter if df is None else df)
        self.spool = spool
        #: Scrapy's order within a priority, from the project's queue settings (crawl_order.py)
        self.order = order or QueueOrder()
        self.stats = crawler.stats
        #: stats gathered on the hot path, added to the crawler's stats in publish_counts()
        self.counts = dupefilter.counts
        self._published = PublishedCounts(self.counts, self.stats, dupefilter)
        self.runs_start = False
        self._make_redis_thread = redis_thread
        self.io: RedisThread | None = None
        #: the leased requests under way on this node, until each is acked or released
        self.leases = LeaseTracker(lambda: self.io.submit if self.io else None, self.counts)
        #: the results of this node's pages until their acks (None: results off, or not open)
        self.results: ResultCollector | None = None
        #: requests that cannot travel, crawled here (see _keep_here)
        self.local = LocalRequests()
        self._rollbacks_seen = 0
        #: the job's start() on this node (see node/start_run.py); set by open()
        self.start: StartRun | None = None
        #: sends the growth of this node's Scrapy stats to the job's sums (stats_sender.py)
        self.stats_sender: StatsSender | None = None
        #: closes the spider once open, when the node could not join (see stop_reasons.py)
        self._stop: StopWhenOpened | None = None
        #: True once CLOSESPIDER_PAGECOUNT is reached (ClusterCloseSpider sets it when opened)
        self.pages_used_up: Callable[[], bool] = bool
        #: start() waits on these while the node starves for its own requests (own_requests_sent)
        self._start_waiters = Waiters()
        self.gate_tells_starts = False  # the download gate calls request_started() then

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, **scheduler_parts(crawler))

    @property
    def df(self) -> BaseDupeFilter:
        """The project's ``DUPEFILTER_CLASS``, as Scrapy's scheduler has it."""
        return self.dedup.df

    # ---- Scrapy's scheduler interface ------------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None] | None:
        """Start the node's Redis thread, which joins the job in Redis (the reactor does not
        wait meanwhile); returns a Deferred that fires once it did, then with ``df.open()``.

        A node that cannot join (Redis unreachable or refusing it, the job finished) logs why
        and closes as soon as the spider is open (stop_reasons.py): it never joined, so it has
        nothing to lose, and a clear stop beats a node that silently crawls nothing.
        """
        if self.codec.spider is None:
            self.codec.spider = spider
        inflight = self.leases.inflight
        # runs_start: the Redis thread reports it once it joined
        self.node_info = node_info = NodeInfo(self.crawler.stats, spider.name, False,
                             inflight=lambda: len(inflight), node_id=self.config.node_id,
                             settings=self.crawler.settings, spider_cls=type(spider),
                             redis_url=self.config.redis_url)
        joining = partial(open_node, self.store, self.config, self.spool, type(spider))
        io = self._make_redis_thread(self.store, self.config, joining, node_info.snapshot,
                                     self.wake_engine)
        opened = io.open().addCallback(self._opened, io)
        return opened.addCallback(lambda _: maybeDeferred(self.df.open))

    def _opened(self, opened: NodeOpened | str, io: RedisThread) -> None:
        """The Redis thread joined the job (or found why the node must stop)."""
        if isinstance(opened, str):
            self._stop = StopWhenOpened(self.crawler, opened)
            return
        self.io = io
        self._epoch, self.runs_start = opened.epoch, opened.runs_start
        if opened.spool_replayed:
            self.counts["clustersync/spool_replayed"] += opened.spool_replayed
        self.start = StartRun(self.crawler, self.config, io, claimed=self.runs_start)
        self.stats_sender = StatsSender(self.crawler.stats, io.submit,
                                        max(1.0, self.config.heartbeat_interval_s))
        io.listen(self.node_changed)
        leases = self.leases
        io.size_leases(DownloaderDemand(
            lambda: started_part(self.crawler, "engine"),
            lambda: len(leases.inflight) - len(leases.scraping), self.crawler.settings))
        scraper = getattr(started_part(self.crawler, "engine"), "scraper", None)
        self.leases.watch(scraper)
        self.results = open_results(self.crawler, self.config.results, self.config.node_id,
                                    lambda: self.io.submit if self.io else None, self.leases,
                                    scraper)
        self.crawler.signals.send_catch_log(node_opened, scheduler=self)
        if not self.gate_tells_starts:
            self.crawler.signals.connect(self.request_started, signals.request_reached_downloader)
        logger.info(
            "clustersync: node %s joined job %r at %s%s", self.config.node_id, self.config.job,
            redact_url(self.config.redis_url),
            "; this node runs the spider's start()" if self.runs_start else
            "; start() already ran elsewhere, this node takes work from the shared queue",
        )

    def close(self, reason: str) -> Deferred[None] | None:
        """Hand back unfinished leases, send every buffered write and leave the job; returns a
        Deferred that fires once the Redis thread did (the reactor does not wait meanwhile),
        then with ``df.close(reason)``.

        Shared state is never deleted here: the job lives on for the other nodes.
        """
        io = self.io
        if io is None:
            return self.df.close(reason)
        if reason == FINISHED:
            logger.info("clustersync: job %r finished: %s", self.config.job, io.finish_note)
        if self.stats_sender is not None:  # the last growth leaves with the last writes
            self.stats_sender.send()
        left = io.close(unacked=sorted(self.leases.inflight))
        left.addCallback(self._left)
        return left.addCallback(lambda _: maybeDeferred(self.df.close, reason))

    def _left(self, undelivered: Undelivered) -> None:
        """The Redis thread left the job: keep on disk what it could not send."""
        self.publish_counts()
        if undelivered:
            path = self.spool.save(self.config.node_id, self._epoch, undelivered,
                                   self.config.batch_size)
            why = ("the job's results stream was full at close" if undelivered.results_full
                   else "Redis was unreachable at close")
            logger.error(
                "clustersync: %s; %d writes are kept in %s and are sent by the next node of "
                "job %r started in this directory.", why, len(undelivered), path, self.config.job,
            )

    def has_pending_requests(self) -> bool:
        """True while this node holds requests: kept here, leased and not handed out yet, or
        enqueued and not yet in Redis (so a node never looks idle with requests in transit)."""
        return len(self) > 0

    def __len__(self) -> int:
        """Requests this node holds (see ``has_pending_requests``); Redis's queue is not counted."""
        io = self.io
        return len(self.local) + (io.waiting + io.buffered_pushes if io else 0)

    def enqueue_request(self, request: Request) -> bool:
        """Buffer ``request`` for the shared queue, or keep it here if it cannot travel.

        Returns False only when ``request`` is a duplicate on this node (the project's
        ``DUPEFILTER_CLASS``, then the fingerprints this node already sent). True means it goes
        to Redis, where the atomic dedup check may still filter it (a request another node, or
        an earlier run, sent): counted in ``dupefilter/filtered`` and
        ``clustersync/dedup/filtered``, without ``request_dropped`` (see docs/architecture.md,
        "Dedup"); or, if it cannot be encoded, that this node crawls it itself (see
        ``_keep_here``), as Scrapy keeps requests it cannot serialize in memory.
        """
        replaced = self.leases.replaced_in_downloader(request)  # by a redirect or retry
        accepted, refusal = self._buffer(request, replaced is not None)
        if refusal is not None:
            self._keep_here(request, refusal, replaced is not None)
            return True
        if replaced is not None:
            # right behind the replacement, which Redis queues only if this ack takes effect
            self.leases.ack(replaced)
        return accepted

    def _keep_here(self, request: Request, refusal: UnencodableRequest, replaces: bool) -> None:
        """Crawl here a request that cannot travel (local_requests.py)."""
        self.local.keep(request, refusal, replaces, self.crawler.spider)
        self._io().mark_busy()  # a node holding requests is not idle
        self._count("enqueued", "memory")
        self.counts["scheduler/unserializable"] += 1

    def _buffer(self, request: Request,
                replaces: bool = False) -> tuple[bool, UnencodableRequest | None]:
        """Buffer ``request`` (``replaces``: a redirect or retry of a leased request, whose ack
        follows it); returns (buffered, why it cannot be encoded, if so)."""
        io = self._io()
        if io.rollbacks != self._rollbacks_seen:
            # Redis came back older: fingerprints this node sent may be gone with it
            self._rollbacks_seen = io.rollbacks
            self.dedup.forget_sent()
        fingerprint = self.dedup.fingerprint_if_new(request)
        if fingerprint is None:
            counted = filtered_here(request) if TASK_META_KEY in request.meta else None
            if counted is not None:
                io.submit(counted)
            return False, None
        if fingerprint:  # a second copy is a duplicate, whether this one travels or stays here
            self.dupefilter.sent(fingerprint)
        try:
            blob = self.codec.encode(request)
        except UnencodableRequest as exc:
            return False, exc
        # int(): Scrapy accepts any int-like priority (True, numpy ints), Redis takes a number;
        # a push without a fingerprint (dont_filter, read for its truth, or no dedup) skips
        # the job's dedup check
        flags = self._push_flags(request, bool(fingerprint), replaces)
        io.submit(push_of(request, fingerprint, int(request.priority), blob, flags))
        io.mark_busy()
        self.counts["clustersync/enqueued"] += 1
        self._count("enqueued", "redis")
        return True, None

    def _push_flags(self, request: Request, filtered: bool, replaces: bool) -> int:
        """The ``PushFlags`` of ``request``'s push: its order; ``DONT_FILTER`` unless it is
        ``filtered``; ``REPLACES`` if it ``replaces`` a leased request (its ack follows)."""
        flags = self.order.flags(bool(request.meta.get("is_start_request")))
        if not filtered:
            flags |= PushFlags.DONT_FILTER
        if replaces:
            flags |= PushFlags.REPLACES
        return int(flags)

    def _count(self, event: str, where: str) -> None:
        """Scrapy's ``scheduler/<event>`` stats, total and ``/<where>`` (``redis``, ``memory``)."""
        self.counts[f"scheduler/{event}"] += 1
        self.counts[f"scheduler/{event}/{where}"] += 1

    def next_request(self) -> Request | None:
        """The next request for the engine: one kept on this node, else the next leased one.

        None while the node is closing, while the job is paused or stopping (``clustersync
        pause|stop``: requests under way finish, nothing new starts), while its writes wait for
        Redis (back-pressure) or when nothing is leased yet (the engine asks again; new leases
        wake it). A node that downloads nothing and has nothing leased or kept, but requests of
        its own on their way to Redis, asks the Redis thread to lease as soon as they are in
        (the lease wakes the engine), as Scrapy's scheduler hands out a request as soon as it
        was enqueued; in a crawl it never waits for them. Only a scheduler no engine drives
        (called directly, as Scrapy's own scheduler tests do) waits for them, there being no
        engine to wake (``NO_ENGINE_WAIT_S`` at most, not while Redis is away).
        """
        io = self.io
        if io is None or io.outcome is not None or not io.allows_downloads:
            return None
        if self.pages_used_up():  # as Scrapy's engine, closing for it, takes no more
            return None
        if self.local:
            io.mark_busy()
            self._count("dequeued", "memory")
            self._start_waiters.fire()
            return self.local.pop()
        if not io.accepting_work:
            return None
        # every request in flight is in the scraper: nothing downloads
        if not io.waiting and io.pushes_unleased and not self.leases.downloading:
            io.want_lease()
            if not engine_drives(self.crawler, self):
                io.settle_lease(NO_ENGINE_WAIT_S)  # no engine to wake: the caller waits
        return self._next_leased(io)

    def _next_leased(self, io: RedisThread) -> Request | None:
        # downloading nothing, the engine waits for a lease anyway: it may as well wait for
        # Scrapy's exact order within a priority (prefetch.py); while it downloads, the
        # entries leased ahead keep it fed
        while (entry := io.take(exact=not self.leases.downloading)) is not None:
            entry_id, blob = entry
            try:
                request = self.codec.decode(blob)
            except UndecodableEntry as exc:
                self._dead_letter(entry_id, f"cannot be decoded ({exc})")
                continue
            self.leases.handed_out(request, entry_id)
            io.mark_busy()
            self._start_waiters.fire()
            self.counts["clustersync/leased"] += 1
            self._count("dequeued", "redis")
            return request
        return None

    # ---- the node's life, used by the extension ---------------------------------------------
    def engine_idle(self) -> None:
        """The engine has nothing in progress: no download, nothing in the scraper or pipelines.

        Acks what then ended without reaching the scraper (``LeaseTracker.engine_idle``).
        """
        self.leases.engine_idle()
        if self.io is not None:
            self.io.mark_idle()

    @property
    def outcome(self) -> str | None:
        """None while the node runs on; else the reason it must close with (``finished``, or
        ``clustersync_state_lost`` when the job is gone from Redis)."""
        return self.io.outcome if self.io is not None else None

    def request_started(self, request: Request) -> None:
        """``request_reached_downloader``: the sized lease follows the rate of these."""
        if self.io is not None:
            self.io.request_started()

    def node_changed(self) -> None:
        """The Redis thread handed over something new (called on the reactor): publish the
        stats and run start() if this node must (a claim taken over, an end Redis lost)."""
        io = self.io
        if io is None:
            return
        self.publish_counts()
        if self.stats_sender is not None:
            self.stats_sender.maybe_send()
        if (io.outcome is not None or not io.allows_downloads
                or not (io.pushes_unleased or io.waiting or self.local)):
            self._start_waiters.fire()  # nothing came back, or will, for the engine to send
        if io.outcome is not None:
            return
        if self.start is not None and self.start.needs_run():
            deferred_from_coro(self.start.run())
        elif io.waiting:
            self.wake_engine()  # work waits (leased while the engine could take none)

    def own_requests_sent(self) -> Deferred[None] | None:
        """For start(), after each request it yielded: a Deferred that fires once the engine was
        handed a request (``NO_ENGINE_WAIT_S`` at most), if the node starves for its own
        requests now (nothing downloading, nothing leased or kept, pushes on their way); else
        None. So start() goes on, as in Scrapy, only after the engine could send what it
        yielded: its next requests do not overtake it. The reactor does not wait meanwhile."""
        io = self.io
        if (io is None or self.local or io.waiting or not io.pushes_unleased
                or self.leases.downloading or io.outcome is not None):
            return None
        return self._start_waiters.wait(NO_ENGINE_WAIT_S)

    # ---- internals ---------------------------------------------------------------------------
    def _io(self) -> RedisThread:
        if (io := self.io) is None:
            raise RuntimeError("ClusterScheduler.open() has not run")
        return io

    def _dead_letter(self, entry_id: str, reason: str) -> None:
        logger.error(
            "clustersync: queue entry %s of job %r %s; it is moved to the job's dead letters "
            "(`clustersync dead %s`) and the crawl goes on.",
            entry_id, self.config.job, reason, self.config.job,
        )
        self._io().submit(DeadLetterEntry(entry_id, reason))
        self.counts["clustersync/dead_letters"] += 1

    def wake_engine(self) -> None:
        wake_engine(self.crawler)

    def publish_counts(self) -> None:
        """Add the counts gathered since the last call to the crawler's stats."""
        self._published.publish(self.io.totals() if self.io is not None else None)
