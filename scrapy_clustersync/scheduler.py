"""ClusterScheduler: Scrapy's scheduler replaced by the job's shared, crash-safe queue in Redis.

Requests are leased, not popped: a request handed to this node stays in Redis, under a lease
that the node's heartbeat renews, until it is acked. A node that dies stops renewing; its
leases expire (Redis server time) and go back to the queue.

When is a leased request done? Scrapy's scraper takes every downloaded response (or download
failure) through ``Scraper.enqueue_scrape``, whose Deferred fires only once the callback (or
errback, or a spider middleware's ``process_spider_exception``) has been run to its end and
*every* request it yielded has gone through ``engine.crawl()`` (so through
``enqueue_request``, which buffers it) and every item has been through the item pipelines.
That is what Scrapy itself waits for before it calls a spider idle, whatever the reactor and
however long the output. The ack is buffered then, behind all of those pushes in the one
ordered write stream, so Redis never holds the ack without the children.
A request replaced in the downloader (redirect, retry) is acked once its replacement is buffered.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import CloseSpider

from .codec import LEASE_META_KEY, RequestCodec, UndecodableEntry, UnencodableRequest
from .config import ClusterConfig, redact_url
from .dupefilter import ClusterDupeFilter
from .nodeinfo import NodeInfo
from .spool import Spool
from .store import JobStore, StoreError, make_client
from .worker import SyncWorker

START_WAIT_POLL_S = 0.25
MIN_REDIS_VERSION = (7, 0)

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

_schedulers: weakref.WeakKeyDictionary[Crawler, ClusterScheduler] = weakref.WeakKeyDictionary()


def scheduler_for(crawler: Crawler) -> ClusterScheduler | None:
    """The running ClusterScheduler of ``crawler``, for the middlewares and the extension."""
    return _schedulers.get(crawler)


class ClusterScheduler:
    def __init__(
        self,
        crawler: Crawler,
        config: ClusterConfig,
        store: JobStore,
        codec: RequestCodec,
        dupefilter: ClusterDupeFilter,
        spool: Spool,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.store = store
        self.codec = codec
        self.dupefilter = dupefilter
        self.spool = spool
        self.stats = crawler.stats
        #: stats gathered on the hot path, added to the crawler's stats in publish_counts()
        self.counts = dupefilter.counts
        self._published: dict[str, int] = {}
        self.runs_start = False
        self.worker: SyncWorker | None = None
        #: leased requests handed to the engine and not acked yet
        self.inflight: set[str] = set()
        #: of those, the ones whose response (or failure) is in Scrapy's scraper right now
        self.scraping: set[str] = set()
        self._rollbacks_seen = 0
        #: the worker's rollback count when this node exhausted start(); None: it did not
        self._start_done_at: int | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.spider is not None and crawler.stats is not None
        settings = crawler.settings
        config = ClusterConfig.from_settings(settings, crawler.spider.name)
        client = make_client(config.redis_url, config.tls, config.socket_timeout_s)
        codec = RequestCodec(
            crawler.spider,
            config.max_request_bytes,
            settings.getlist("CLUSTERSYNC_REQUEST_CLASSES"),
        )
        assert crawler.request_fingerprinter is not None
        dupefilter = ClusterDupeFilter(
            crawler.request_fingerprinter, Counter(), config.local_seen_cache,
            debug=settings.getbool("DUPEFILTER_DEBUG"),
        )
        spool = Spool(settings.get("CLUSTERSYNC_SPOOL_DIR") or ".clustersync-spool", config.job)
        store = JobStore(client, config.job, config.node_id, config.dedup)
        return cls(crawler, config, store, codec, dupefilter, spool)

    # ---- Scrapy's scheduler interface ------------------------------------------------------
    def open(self, spider: Spider) -> None:
        """Join the job in Redis and start the node's Redis thread.

        Raises CloseSpider if Redis cannot be reached at start-up: a node that never joined has
        nothing to lose, and a clear stop beats a node that silently crawls nothing.
        """
        ttl_ms = int(self.config.lease_timeout_s * 1000)
        try:
            epoch, self.runs_start = self.store.join(ttl_ms)
        except StoreError as exc:
            logger.error(
                "clustersync: cannot join job %r at %s: %s. Check CLUSTERSYNC_REDIS_URL and "
                "that Redis is running.", self.config.job, redact_url(self.config.redis_url), exc,
            )
            raise CloseSpider("clustersync_redis_unreachable") from None
        self._check_server_version()
        if self.store.dedup != self.config.dedup:
            logger.warning(
                "clustersync: job %r was created with dedup settings %s; this node's settings "
                "(%s) are ignored so that every node records fingerprints the same way.",
                self.config.job, self.store.dedup, self.config.dedup,
            )
        node_info = NodeInfo(self.crawler, self.config, self)
        self.worker = SyncWorker(
            self.store, self.config, epoch, node_info.snapshot,
            on_leased=self._wake_engine_threadsafe,
            start_state="mine" if self.runs_start else "other",
        )
        self._replay_spool(epoch)
        self._watch_scraper()
        self.worker.start()
        _schedulers[self.crawler] = self
        logger.info(
            "clustersync: node %s joined job %r at %s%s", self.config.node_id, self.config.job,
            redact_url(self.config.redis_url),
            "; this node runs the spider's start()" if self.runs_start else
            "; start() already ran elsewhere, this node takes work from the shared queue",
        )

    def close(self, reason: str) -> None:
        """Hand back unfinished leases, send every buffered write and leave the job.

        Shared state is never deleted here: the job lives on for the other nodes.
        """
        _schedulers.pop(self.crawler, None)
        if self.worker is None:
            return
        undelivered = self.worker.close(unacked=sorted(self.inflight))
        self.publish_counts()
        if undelivered:
            path = self.spool.save(self.config.node_id, self.worker.epoch, undelivered,
                                   self.config.batch_size)
            logger.error(
                "clustersync: Redis was unreachable at close; %d writes are kept in %s and are "
                "sent by the next node of job %r started in this directory.",
                len(undelivered), path, self.config.job,
            )

    def _check_server_version(self) -> None:
        try:
            version = self.store.server_version()
        except StoreError:
            return  # the join just worked; the version is only worth a warning
        if version and version < MIN_REDIS_VERSION:
            logger.warning(
                "clustersync: Redis at %s is version %s; clustersync needs %s or newer and is "
                "not tested on older versions.", redact_url(self.config.redis_url),
                ".".join(map(str, version)), ".".join(map(str, MIN_REDIS_VERSION)),
            )

    def _replay_spool(self, epoch: str) -> None:
        """Send what nodes that stopped during an outage left in this directory (see spool.py)."""
        def store_for(node_id: str, writes_seen: int) -> JobStore:
            return JobStore(self.store.client, self.config.job, node_id, self.store.dedup,
                            writes_seen=writes_seen)

        sent = self.spool.replay(epoch, store_for)
        if sent:
            self.counts["clustersync/spool_replayed"] += sent

    def _watch_scraper(self) -> None:
        """Learn when Scrapy has finished with each response or failure (see the module doc)."""
        engine: Any = self.crawler.engine
        scraper: Any = getattr(engine, "scraper", None)
        enqueue_scrape = getattr(scraper, "enqueue_scrape", None)
        if enqueue_scrape is None:  # pragma: no cover - every supported Scrapy has it
            logger.warning("clustersync: this Scrapy has no Scraper.enqueue_scrape; requests "
                           "are acked when the node goes idle")
            return

        def watched(result: Any, request: Request, *args: Any, **kwargs: Any) -> Any:
            token = request.meta.get(LEASE_META_KEY)
            if token not in self.inflight:
                return enqueue_scrape(result, request, *args, **kwargs)
            self.scraping.add(token)
            try:
                scraped = enqueue_scrape(result, request, *args, **kwargs)
            except BaseException:
                self.scraping.discard(token)
                raise
            return scraped.addBoth(self._scraped, token)

        scraper.enqueue_scrape = watched

    def _scraped(self, result: Any, token: str) -> Any:
        """Everything the callback or errback of ``token`` produced has been buffered."""
        self.scraping.discard(token)
        self.ack(token)
        return result

    def has_pending_requests(self) -> bool:
        return bool(self.worker and self.worker.prefetched)

    def __len__(self) -> int:
        return len(self.worker.prefetched) if self.worker else 0

    def enqueue_request(self, request: Request) -> bool:
        """Buffer ``request`` for the shared queue.

        Returns False when ``request`` is a duplicate this node already sent, or when it cannot
        be encoded (the error is logged naming the request and the field). True means it goes to
        Redis, where the atomic dedup check may still filter it (counted in
        ``clustersync/dedup/filtered``).
        """
        accepted = self._buffer(request)
        token = request.meta.get(LEASE_META_KEY)
        if token in self.inflight and token not in self.scraping:
            # a redirect or retry replaced the leased request in the downloader (a child whose
            # meta was copied from its parent's response comes while the parent is scraped):
            # the replacement was buffered first
            self.ack(token)
        return accepted

    def _buffer(self, request: Request) -> bool:
        assert self.worker is not None
        if self.worker.rollbacks != self._rollbacks_seen:
            # Redis came back older: fingerprints this node sent may be gone with it
            self._rollbacks_seen = self.worker.rollbacks
            self.dupefilter.forget_sent()
        fingerprint = b"" if request.dont_filter else self.dupefilter.fingerprint(request)
        if fingerprint and self.dupefilter.seen_here(fingerprint, request):
            return False
        try:
            blob = self.codec.encode(request)
        except UnencodableRequest as exc:
            logger.error("clustersync: %s", exc)
            self.counts["clustersync/unencodable"] += 1
            return False
        if fingerprint:
            self.dupefilter.sent(fingerprint)
        # int(): Scrapy accepts any int-like priority (True, numpy ints); Redis takes numbers
        self.worker.add(("P", fingerprint, int(request.priority), blob, int(request.dont_filter)))
        self._busy()
        self.counts["clustersync/enqueued"] += 1
        return True

    def next_request(self) -> Request | None:
        worker = self.worker
        if worker is None or worker.finished or worker.state_lost:
            return None
        if worker.backlog > self.config.buffer_limit:
            return None  # back-pressure while writes cannot reach Redis
        while worker.prefetched:
            entry_id, blob = worker.prefetched.popleft()
            if len(worker.prefetched) == self.config.prefetch // 2:
                worker.wake()  # lease more before the buffer runs dry
            try:
                request = self.codec.decode(blob)
            except UndecodableEntry as exc:
                self._dead_letter(entry_id, str(exc))
                continue
            request.meta[LEASE_META_KEY] = entry_id
            self.inflight.add(entry_id)
            self._busy()
            self.counts["clustersync/leased"] += 1
            return request
        return None

    # ---- completion, used by the middleware and the extension --------------------------------
    def ack(self, token: str | None) -> None:
        """The leased request ``token`` is done; what it produced was buffered before this."""
        if token not in self.inflight or self.worker is None:
            return
        self.inflight.discard(token)
        self.worker.add(("A", token))
        self.counts["clustersync/acked"] += 1

    def engine_idle(self) -> None:
        """The engine has nothing in progress: no download, nothing in the scraper or pipelines.

        A leased request still counted in flight then ended without reaching the scraper (a
        replacement that a ``request_scheduled`` handler ignored): everything it led to is
        buffered, so it is acked.
        """
        for token in sorted(self.inflight - self.scraping):
            self.counts["clustersync/acked_on_idle"] += 1
            self.ack(token)
        if self.worker is not None:
            self.worker.node_idle = True
            self.worker.wake()

    def start_exhausted(self) -> None:
        if self.worker is not None:
            self.worker.add(("S",))
            self.worker.start_state = "done"
            self._start_done_at = self.worker.rollbacks

    def start_lost(self) -> bool:
        """This node ran start(), and Redis came back older than the end of it.

        start()'s requests may be among the lost writes, and the job cannot finish before
        start() is done again, so this node runs it again (see ``rerun_start``).
        """
        worker = self.worker
        return worker is not None and self._start_done_at is not None and \
            worker.start_state_rollbacks > self._start_done_at and \
            worker.start_state in ("mine", "none")

    async def rerun_start(self) -> None:
        """Run the spider's start() again, its requests straight to the engine.

        Only after Redis lost the writes that ended start() (see ``start_lost``). Requests it
        yields that Redis still has are dropped by dedup; items are not sent again (their
        pipelines ran the first time).
        """
        assert self.worker is not None
        self._start_done_at = None
        logger.warning("clustersync: Redis lost the end of job %r's start(); node %s runs "
                       "start() again", self.config.job, self.config.node_id)
        engine: Any = self.crawler.engine
        async for item_or_request in self.crawler.spider.start():  # type: ignore[union-attr]
            if isinstance(item_or_request, Request) and engine.spider is not None:
                engine.crawl(item_or_request)
        self.start_exhausted()

    async def wait_for_start(self) -> bool:
        """Wait while another node runs the job's start(); True if this node must run it.

        That is the case when the node that claimed start() is no longer alive before start()
        was exhausted: the heartbeat takes the claim over. The job cannot finish meanwhile.
        """
        worker = self.worker
        if worker is None:
            return False
        worker.wants_start = True
        try:
            while worker.start_state in ("other", "none") and not self._stopping():
                if worker.start_state == "none":
                    return False  # nobody claimed it (a job seeded from the command line)
                await _sleep(START_WAIT_POLL_S)
        finally:
            worker.wants_start = False
        if worker.start_state != "mine" or self._stopping():
            return False
        logger.warning(
            "clustersync: the node that ran start() of job %r stopped before start() was "
            "exhausted; node %s runs it now (requests it yields that are already queued or "
            "seen are dropped by dedup, except dont_filter=True ones)",
            self.config.job, self.config.node_id,
        )
        self.counts["clustersync/start_takeovers"] += 1
        return True

    def _stopping(self) -> bool:
        worker = self.worker
        return worker is None or worker.finished or bool(worker.state_lost) or \
            self.crawler.crawling is False

    def _busy(self) -> None:
        assert self.worker is not None
        self.worker.node_idle = False
        self.worker.activity += 1

    # ---- internals ---------------------------------------------------------------------------
    def _dead_letter(self, entry_id: str, reason: str) -> None:
        assert self.worker is not None
        logger.error(
            "clustersync: queue entry %s of job %r cannot be decoded (%s); it is moved to the "
            "job's dead letters and the crawl goes on.", entry_id, self.config.job, reason,
        )
        self.worker.add(("D", entry_id, reason))
        self.counts["clustersync/dead_letters"] += 1

    def _wake_engine_threadsafe(self) -> None:  # called from the Redis thread
        from twisted.internet import reactor

        reactor.callFromThread(self.wake_engine)

    def wake_engine(self) -> None:
        # Scrapy polls next_request() only when a request finishes or every 5 s; new work that
        # arrives while the node waits must start now. The slot is private, hence the care.
        slot: Any = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def publish_counts(self) -> None:
        """Add the counts gathered since the last call to the crawler's stats."""
        if self.worker is not None:
            delta = {name: total - self._published.get(name, 0)
                     for name, total in self.worker.totals.items()}
            self._published.update(self.worker.totals)
            self.counts["clustersync/pushed"] += delta["pushed"]
            self.counts["clustersync/released"] += delta["released"]
            self.dupefilter.filtered_in_redis(delta["filtered"])
        for key, value in self.counts.items():
            if value:
                self.stats.inc_value(key, value)
        self.counts.clear()


async def _sleep(seconds: float) -> None:
    """Sleep without blocking the reactor, under the asyncio and the plain Twisted reactor."""
    from scrapy.utils.defer import maybe_deferred_to_future
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    await maybe_deferred_to_future(deferLater(reactor, seconds, lambda: None))
