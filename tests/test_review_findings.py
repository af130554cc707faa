"""Regression tests from an adversarial review: ways a page or an item was lost, or a job hung.

Each test is a minimal reproduction with real `scrapy crawl` nodes and a real redis-server; each
failed on the code the review read, and its docstring says what went wrong there.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    marks,
    missing_pages,
    node_env,
    project_with_spiders,
    start_node,
    wait_all,
    wait_until,
)

SPIDERS = '''
    import os

    import scrapy
    from scrapy.exceptions import CloseSpider

    from example.spiders.helpers import mark, sleep
    from example.spiders.site import SiteSpider


    class FollowSpider(SiteSpider):
        """Follows every link; the base of the spiders below."""

        name = "follow"

        @property
        def base(self):
            return self.start_url.rsplit("/", 1)[0]

        def parse(self, response):
            mark("parsed", f"{self.settings.get('USER_AGENT')} {response.url}")
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href)


    class StartErrorSpider(FollowSpider):
        """start() yields page 0, then fails (a bug, an API that went away, ...)."""

        name = "starterror"

        async def start(self):
            yield scrapy.Request(self.start_url)
            raise RuntimeError("the list of start URLs could not be read")


    class BannedSpider(FollowSpider):
        """A node that sees a ban page stops itself (CloseSpider); the other nodes go on."""

        name = "banned"

        def parse(self, response):
            if self.settings.getbool("BANNED") and response.url.endswith("/page/5.html"):
                raise CloseSpider("banned")
            yield from super().parse(response)


    class StartItemsSpider(FollowSpider):
        """start() yields an item (hard-coded data, a feed header, ...) and page 0."""

        name = "startitems"

        async def start(self):
            yield {"from": "start"}
            yield scrapy.Request(self.start_url)


    class SlowStartItemsPipeline:
        """Items of start() take SLOW_S seconds (a slow database write); notes each done item."""

        def __init__(self, crawler):
            self.slow_s = crawler.settings.getfloat("SLOW_S")
            self.agent = crawler.settings.get("USER_AGENT")

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        async def process_item(self, item):
            if item.get("from") == "start":
                mark("start_item_begun", self.agent)
                await sleep(self.slow_s)
                mark("start_items", self.agent)
            return item


    class SlowStartSpider(FollowSpider):
        """start() yields page 0 .. PAGES-1 slowly; callbacks follow nothing."""

        name = "slowstart"

        async def start(self):
            for index in range(self.settings.getint("PAGES")):
                mark("started", f"{self.settings.get('USER_AGENT')} {index}")
                yield scrapy.Request(f"{self.base}/{index}.html")
                await sleep(0.2)

        def parse(self, response):
            yield {"url": response.url}


    class MiddlewareStartSpider(SlowStartSpider):
        """The spider's own start() yields page 0 only; a spider middleware (a plugin that
        reads URLs from a file, a sitemap, a queue) adds pages 1 .. PAGES-1 in process_start."""

        name = "mwstart"

        async def start(self):
            yield scrapy.Request(f"{self.base}/0.html")


    class ExtraStartUrls:
        async def process_start(self, start):
            async for item_or_request in start:
                yield item_or_request
            spider_base = os.environ["SITE_BASE"]
            pages = int(os.environ["PAGES"])
            for index in range(1, pages):
                mark("started", f"mw {index}")
                yield scrapy.Request(f"{spider_base}/{index}.html")
                await sleep(0.2)


    class QuickStartSpider(SlowStartSpider):
        """start() yields page 0 .. PAGES-1 at once; callbacks follow nothing."""

        name = "quickstart"

        async def start(self):
            for index in range(self.settings.getint("PAGES")):
                yield scrapy.Request(f"{self.base}/{index}.html")


    class PacedStart:
        """A spider middleware close to the engine (negative order) that reads all of
        start() first, then feeds it to the engine at a steady pace (a rate limiter)."""

        async def process_start(self, start):
            collected = [item_or_request async for item_or_request in start]
            for item_or_request in collected:
                mark("fed", item_or_request.url)
                yield item_or_request
                await sleep(0.5)


    class ChaosSpider(FollowSpider):
        """Links reached in six ways: plain, meta copied from the parent (lease token and all),
        through a redirect, through a 503 then a retry then a redirect, through an errback of a
        request the downloader ignores, through an errback of a 404. An async callback."""

        name = "chaos"

        async def parse(self, response):
            import re
            page = int(re.search(r"/page/(\\d+)[.]html", response.url).group(1))
            yield {"page": page}
            if page % 7 == 0:
                await sleep(0.05)
            for i, href in enumerate(response.css("a::attr(href)").getall()):
                url = response.urljoin(href)
                kind = (page + i) % 6
                if kind == 0:
                    yield scrapy.Request(url)
                elif kind == 1:
                    yield scrapy.Request(url, meta=dict(response.meta))
                elif kind == 2:
                    yield scrapy.Request(url + "?redirect=1")
                elif kind == 3:
                    yield scrapy.Request(url + "?flaky=1")
                elif kind == 4:
                    yield scrapy.Request(url + "?ignore=1", errback=self.retry_plain)
                else:
                    yield scrapy.Request(url + "?gone=1", errback=self.retry_plain)

        def retry_plain(self, failure):
            yield scrapy.Request(failure.request.url.split("?")[0], meta=failure.request.meta)


    class ChaosDownloaderMiddleware:
        def process_request(self, request):
            from scrapy.exceptions import IgnoreRequest
            from scrapy.http import HtmlResponse
            url, _, query = request.url.partition("?")
            if query == "redirect=1":
                return HtmlResponse(request.url, status=302, headers={"Location": url})
            if query == "flaky=1":
                if not request.meta.get("retry_times"):
                    return HtmlResponse(request.url, status=503)
                return HtmlResponse(request.url, status=302, headers={"Location": url})
            if query == "ignore=1":
                raise IgnoreRequest("ignored")
            if query == "gone=1":
                return HtmlResponse(request.url, status=404)
            return None


    class PagesPipeline:
        def __init__(self, crawler):
            self.path = crawler.settings.get("PAGES_FILE")

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        def open_spider(self):
            self.file = open(self.path, "a", buffering=1)

        def close_spider(self):
            self.file.close()

        async def process_item(self, item):
            if "page" in item:
                await sleep(0.002)
                self.file.write(f"{item['page']}\\n")
            return item


    class StuckSpider(FollowSpider):
        """On one node, the callback of page 5 blocks the reactor (a synchronous call without a
        timeout: a database lock, a socket that never answers)."""

        name = "stuck"

        def parse(self, response):
            if self.settings.getbool("STUCK") and response.url.endswith("/page/5.html"):
                import time
                mark("stuck", response.url)
                time.sleep(600)
            yield from super().parse(response)


    class ConnectionInMetaMiddleware:
        """A downloader middleware that keeps a live object in meta (a proxy/session handle,
        a browser page), and answers 503 to the first attempt of page 3."""

        def process_request(self, request):
            from scrapy.http import HtmlResponse
            request.meta["session"] = object()
            if request.url.endswith("/page/3.html") and not request.meta.get("retry_times"):
                return HtmlResponse(request.url, status=503)
            return None
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The example project plus the spiders above; marks go to ``tmp_path/marks``."""
    return project_with_spiders(tmp_path, "review", SPIDERS)


def test_a_start_that_raises_does_not_hang_the_job_for_ever(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """start() yields page 0 and then raises. Plain Scrapy crawls what start() yielded and
    closes with reason "start_error". Here the node never calls start_exhausted() (the
    exception goes through ClusterSpiderMiddleware.process_start), the job's start() stays
    claimed by a live node, the heartbeat never says finished: the node runs for ever."""
    web = site(20)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, {},
                      project_dir=project, spider="starterror", env=node_env(tmp_path))
    wait_all([node], timeout_s=60)
    assert missing_pages(web) == []
    assert node.finish_reason() in ("finished", "start_error")


def test_a_page_whose_callback_raised_closespider_is_crawled_again_by_the_cluster(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """A chain of 20 pages (page i links to page i+1 only). The first node raises CloseSpider
    ("banned") in the callback of page 5, as spiders do when they see a ban page: that node
    stops, the cluster goes on with a second, healthy node. Page 5's callback never ran to its
    end (it yielded nothing), yet the scheduler acks it when the scrape Deferred fires
    (scheduler.py ClusterScheduler._scraped), so pages 6-19 are never crawled and the job
    ends "finished" with them missing."""
    web = site(20, links_per_page=1)
    banned = start_node("banned", redis_server.url, web.start_url, tmp_path, {"BANNED": "1"},
                        project_dir=project, spider="banned", env=node_env(tmp_path))
    wait_all([banned], timeout_s=60)
    assert banned.finish_reason() == "banned"
    healthy = start_node("healthy", redis_server.url, web.start_url, tmp_path, {},
                         project_dir=project, spider="banned", env=node_env(tmp_path))
    wait_all([healthy], timeout_s=60)
    assert healthy.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_an_item_yielded_by_start_goes_through_the_pipelines_even_if_its_node_is_killed(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """start() yields an item, then page 0. Scrapy sends start() items to the pipelines without
    waiting (ExecutionEngine._process_start_next -> Scraper._start_itemproc_nowait), and
    ClusterSpiderMiddleware.process_start marks start() exhausted ("S", start_done in Redis)
    as soon as the iteration ends, while that item is still in a slow pipeline. A kill -9
    then loses the item for good: start() is done, no node runs it again."""
    web = site(5)
    settings = {"SLOW_S": "10",
                "ITEM_PIPELINES": '{"example.spiders.review.SlowStartItemsPipeline": 100}'}
    first = start_node("first", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=project, spider="startitems", env=node_env(tmp_path))
    client = redis_server.client()
    wait_until(lambda: marks(tmp_path, "start_item_begun") == ["first"], 60,
               "start()'s item to be in the pipeline")
    time.sleep(1.0)  # far longer than a flush takes
    # start() is not done while its item is in the pipeline
    assert not client.hexists("clustersync:{startitems}:meta", "start_done")
    assert marks(tmp_path, "start_items") == []
    first.kill()
    second = start_node("second", redis_server.url, web.start_url, tmp_path,
                        {**settings, "SLOW_S": "0"}, project_dir=project, spider="startitems",
                        env=node_env(tmp_path))
    wait_all([second], timeout_s=60)
    assert missing_pages(web) == []
    # the item start() yielded went through the pipelines at least once
    assert marks(tmp_path, "start_items") != []


def test_start_lost_by_a_rollback_is_run_again_when_the_node_that_ran_it_has_left(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """Node "runner" runs start() (30 pages, slowly); node "other" waits for it. Redis is saved
    while start() is under way. start() ends, "runner" leaves (SIGTERM: scale-down, deploy),
    then Redis crashes and comes back from the snapshot: start_done is gone and start_claim
    names "runner". Only the node that exhausted start() itself reruns it
    (ClusterScheduler.start_lost); "other" gets start == "other" from every heartbeat
    (heartbeat.lua takes a dead node's claim over only for a node in wait_for_start, whose
    wait ended long ago), so the job never finishes, and start()'s pages yielded after the
    snapshot (and not crawled before the crash) are never crawled."""
    web = site(30, delay_s=0.3)
    settings = {"PAGES": "30", "CONCURRENT_REQUESTS": "1"}
    runner = start_node("runner", redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=project, spider="slowstart", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "started")) >= 2, 60, "start() to be under way")
    other = start_node("other", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=project, spider="slowstart", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) == 30, 60, "start() to be exhausted")
    time.sleep(0.5)
    runner.process.send_signal(signal.SIGTERM)
    assert runner.wait(60) == 0
    redis_server.restart(crash=True)
    wait_all([other], timeout_s=90)
    assert other.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_start_run_again_after_a_rollback_includes_what_spider_middlewares_add(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """As test_guarantees::test_start_runs_again_when_redis_comes_back_older_than_its_end, but
    the start requests come from a spider middleware's process_start (as plugins that read
    URLs from a file, a sitemap or a queue do). ClusterScheduler.rerun_start iterates
    ``spider.start()`` directly, not the middleware chain, so after the rollback only page 0
    is yielded again; the pages the middleware yielded after the snapshot are lost, and the
    job ends "finished" without them."""
    web = site(30, delay_s=0.3)
    settings = {"PAGES": "30", "CONCURRENT_REQUESTS": "1",
                "SPIDER_MIDDLEWARES": '{"example.spiders.review.ExtraStartUrls": 600}'}
    env = node_env(tmp_path, SITE_BASE=web.url + "/page", PAGES="30")
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, settings,
                      project_dir=project, spider="mwstart", env=env)
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) == 29, 60, "start() to be exhausted")
    time.sleep(0.5)
    redis_server.restart(crash=True)
    wait_all([node], timeout_s=120)
    assert "runs start() again" in node.log()
    assert node.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_start_requests_lost_by_a_rollback_while_start_runs_are_yielded_again(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """As test_guarantees::test_start_runs_again_when_redis_comes_back_older_than_its_end,
    but Redis crashes back to the snapshot while start() is still running (the default Redis
    setup, RDB snapshots, does this). The node notices the rollback, start() goes on and ends,
    and ClusterScheduler.start_exhausted records ``_start_done_at = worker.rollbacks``, a count
    that already includes this rollback: start_lost() never becomes true, start() is not run
    again, and the requests start() yielded between the snapshot and the crash (queued, not
    crawled yet) are gone. The job ends "finished" without those pages."""
    web = site(30, delay_s=0.3)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      {"PAGES": "30", "CONCURRENT_REQUESTS": "1"}, project_dir=project,
                      spider="slowstart", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) >= 20, 60, "start() to go on")
    redis_server.restart(crash=True)
    wait_all([node], timeout_s=120)
    assert "came back older" in node.log()
    assert node.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_start_is_not_done_before_a_spider_middleware_closer_to_the_engine_is_done_with_it(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """ClusterSpiderMiddleware sat at order 0 and sent "S" (start() exhausted) when *its*
    iteration ended. A spider middleware at a negative order (closer to the engine) may hold
    start()'s output for a while (here: it reads it all, then feeds it at a pace). start_done
    is then in Redis before the requests reach the scheduler; a kill -9 there loses them: no
    node runs start() again, and the job ends "finished" without them."""
    web = site(10)
    settings = {"PAGES": "10",
                "SPIDER_MIDDLEWARES": '{"example.spiders.review.PacedStart": -10}'}
    first = start_node("first", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=project, spider="quickstart", env=node_env(tmp_path))
    client = redis_server.client()
    wait_until(lambda: client.hexists("clustersync:{quickstart}:meta", "start_done"), 60,
               "start() to be marked exhausted in Redis")
    # start() is done only once the middleware nearest the engine has handed all of it over
    assert len(marks(tmp_path, "fed")) == 10
    first.kill()
    second = start_node("second", redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=project, spider="quickstart", env=node_env(tmp_path))
    wait_all([second], timeout_s=60)
    assert second.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_a_node_whose_reactor_is_stuck_does_not_keep_its_pages_for_ever(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """A node whose reactor is blocked (a synchronous call that never returns, in a callback
    or a pipeline) is as dead to the crawl as a SIGSTOPped one, but its Redis thread
    (worker.py SyncWorker._run) keeps heartbeating and renewing every lease it holds
    (heartbeat.lua renews ``held`` regardless of progress). Its pages are never reclaimed:
    pages reachable only through them are never crawled, and the job never finishes."""
    web = site(20, links_per_page=1)
    stuck = start_node("stuck", redis_server.url, web.start_url, tmp_path, {"STUCK": "1"},
                       project_dir=project, spider="stuck", env=node_env(tmp_path))
    healthy = None
    try:
        wait_until(lambda: marks(tmp_path, "stuck") != [], 60, "the reactor to block")
        healthy = start_node("healthy", redis_server.url, web.start_url, tmp_path, {},
                             project_dir=project, spider="stuck", env=node_env(tmp_path))
        # a lease is 3 s here: far more than enough for page 5 to be reclaimed and crawled
        deadline = time.monotonic() + 45
        while missing_pages(web) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert missing_pages(web) == []
    finally:
        stuck.kill()
        if healthy is not None:
            healthy.kill()


def test_a_retry_that_cannot_be_queued_does_not_ack_the_request_it_replaces(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    """A chain of 10 pages. A downloader middleware keeps a live object in ``request.meta``
    (as session/proxy/browser middlewares do) and page 3's first attempt gets a 503. The
    retry RetryMiddleware builds copies that meta, so it cannot be encoded: enqueue_request
    logs an error and returns False, and then acks the leased page 3 anyway
    (scheduler.py ClusterScheduler.enqueue_request: the ack does not look at ``accepted``).
    Page 3 was a perfectly queueable request the spider yielded; plain Scrapy retries it in
    memory. Here it and every page after it are lost, and the job ends "finished"."""
    web = site(10, links_per_page=1)
    settings = {
        "DOWNLOADER_MIDDLEWARES": '{"example.spiders.review.ConnectionInMetaMiddleware": 950}'}
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, settings,
                      project_dir=project, spider="follow", env=node_env(tmp_path))
    wait_all([node], timeout_s=60)
    assert node.finish_reason() == "finished"
    assert missing_pages(web) == []

