""""Never lost" for the spiders people write: real `scrapy crawl` nodes, real kill -9.

Each test pins one way the promise used to break:
- a page acked before the requests its callback yielded reached Redis (slow item pipeline,
  Scrapy's default asyncio reactor), so a kill in between lost them;
- a failed request whose errback ran stayed leased until the node went idle, so a node that
  left ran it again elsewhere;
- the job finished while start() was still running on a node that then died;
- Redis came back older than the nodes saw it, and what they remembered hid pages for ever.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer, free_port

from conftest import SiteFactory
from support import (
    marks,
    missing_pages,
    node_env,
    open_barrier,
    pages_fetched,
    project_with_spiders,
    start_done,
    start_node,
    wait_all,
    wait_until,
)

SPIDERS = '''
    import scrapy

    from example.spiders.helpers import mark, sleep, wait_for
    from example.spiders.site import SiteSpider


    class ListingSpider(SiteSpider):
        """Each page yields ITEMS items, then its links (a listing page)."""

        name = "listing"

        def parse(self, response):
            for index in range(self.settings.getint("ITEMS")):
                yield {"url": response.url, "index": index}
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href)


    class SlowLastItemsPipeline:
        """The last items of page 0 take BLOCK_S seconds (a stuck database write)."""

        def __init__(self, crawler):
            self.block_s = crawler.settings.getfloat("BLOCK_S")
            self.items = crawler.settings.getint("ITEMS")

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        async def process_item(self, item):
            if self.block_s and item["url"].endswith("/page/0.html") and \\
                    item["index"] >= self.items - 2:
                mark("blocked", item["url"])
                await sleep(self.block_s)
            return item


    class ErrbackSpider(SiteSpider):
        """A slow crawl, and one request that fails and has an errback."""

        name = "errback"

        async def start(self):
            yield scrapy.Request(self.start_url)
            yield scrapy.Request(self.settings.get("FAILING_URL"), errback=self.failed)

        def failed(self, failure):
            mark("errbacks", self.settings.get("USER_AGENT"))
            yield {"failed": failure.request.url}


    class SlowStartSpider(SiteSpider):
        """start() yields page 0 .. PAGES-1 slowly; callbacks follow nothing. With START_HOLD_AT
        it holds before that page until the test opens the barrier "go_on"."""

        name = "slowstart"

        async def start(self):
            base = self.start_url.rsplit("/", 1)[0]
            for index in range(self.settings.getint("PAGES")):
                if index == self.settings.getint("START_HOLD_AT", -1):
                    await wait_for("go_on")
                mark("started", f"{self.settings.get('USER_AGENT')} {index}")
                yield scrapy.Request(f"{base}/{index}.html")
                await sleep(self.settings.getfloat("START_SLEEP", 0.2))

        def parse(self, response):
            yield {"url": response.url}
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The example project plus the spiders above; marks go to ``tmp_path/marks``."""
    return project_with_spiders(tmp_path, "guarantees", SPIDERS)


@pytest.mark.parametrize("reactor", ["asyncio", "select"])
def test_a_page_is_not_acked_before_its_links_are_queued_however_slow_its_items(
    reactor: str, redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    # given a listing spider whose item pipeline is stuck on the last items of page 0, while
    # the links page 0 yielded after its items wait behind them (2 items at a time)
    web = site(60, links_per_page=2)
    settings = {"ITEMS": "30", "CONCURRENT_ITEMS": "2", "BLOCK_S": "60",
                "ITEM_PIPELINES": '{"example.spiders.guarantees.SlowLastItemsPipeline": 100}'}
    if reactor == "select":
        settings["TWISTED_REACTOR"] = "twisted.internet.selectreactor.SelectReactor"
    first = start_node("first", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=project, spider="listing", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "blocked")) == 2, 60, "page 0's last items to block")
    time.sleep(1.0)  # far longer than a flush takes
    # then page 0 is not acked yet: what it yielded is not all through
    stats = redis_server.client().hgetall("clustersync:{listing}:stats")
    assert int(stats.get(b"acked", 0)) == 0
    # when the node is killed there, and a healthy node takes over the job
    first.kill()
    second = start_node("second", redis_server.url, web.start_url, tmp_path,
                        {**settings, "BLOCK_S": "0"}, project_dir=project, spider="listing",
                        env=node_env(tmp_path))
    wait_all([second], timeout_s=120)
    # then page 0 was crawled again once its lease ran out, and no page is lost
    assert missing_pages(web) == []
    assert second.finish_reason() == "finished"


def test_a_request_whose_errback_ran_is_done_and_a_leaving_node_does_not_hand_it_back(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    # given a node on a slow crawl with one request that fails and has an errback
    web = site(300, delay_s=0.05)
    settings = {"FAILING_URL": f"http://127.0.0.1:{free_port()}/nothing-listens-here",
                "CONCURRENT_REQUESTS": "4", "RETRY_ENABLED": "0",
                "CLUSTERSYNC_LEASE_TIMEOUT": "600"}
    leaving = start_node("leaving", redis_server.url, web.start_url, tmp_path, settings,
                         project_dir=project, spider="errback", env=node_env(tmp_path))
    wait_until(lambda: marks(tmp_path, "errbacks") == ["leaving"], 60, "the errback to run")
    time.sleep(1.0)
    assert pages_fetched(web) < 300  # the node is busy: it did not go idle since
    # when that node stops (SIGTERM hands back what it has not finished) and another goes on
    leaving.process.terminate()
    assert leaving.wait(60) == 0
    staying = start_node("staying", redis_server.url, web.start_url, tmp_path, settings,
                         project_dir=project, spider="errback", env=node_env(tmp_path))
    wait_all([staying], timeout_s=180)
    # then the errback ran once in the whole cluster, and every page was crawled
    assert marks(tmp_path, "errbacks") == ["leaving"]
    assert missing_pages(web) == []
    assert staying.finish_reason() == "finished"


def test_the_job_waits_for_start_and_a_live_node_finishes_it_when_its_node_dies(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    # given two nodes started together on a spider whose start() yields 30 pages, and holds
    # after the first 10 until the test lets it go on
    web = site(30)
    settings = {"PAGES": "30", "START_SLEEP": "0", "START_HOLD_AT": "10"}
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=project, spider="slowstart", env=node_env(tmp_path))
             for name in ("node1", "node2")]
    wait_until(lambda: len(marks(tmp_path, "started")) >= 10, 60, "start() to be held half-way")
    # when the node running start() is killed half-way (then start() may go on)
    [runner] = [n for n in nodes if n.name == marks(tmp_path, "started")[0].split()[0]]
    [other] = [n for n in nodes if n is not runner]
    runner.kill()
    open_barrier(tmp_path, "go_on")
    wait_all([other], timeout_s=120)
    # then the other node took start() over and the job finished with every page
    assert missing_pages(web) == []
    assert other.finish_reason() == "finished"
    assert "runs it now" in other.log()
    assert any(line.startswith(other.name) for line in marks(tmp_path, "started"))


def test_redis_rolled_back_to_an_older_snapshot_loses_no_page(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling, and a snapshot of Redis taken mid-crawl
    web = site(500, delay_s=0.01)
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path)
             for name in ("node1", "node2")]
    wait_until(lambda: pages_fetched(web) >= 100, 60, "100 pages")
    redis_server.client().save()
    at_snapshot = pages_fetched(web)
    wait_until(lambda: pages_fetched(web) >= at_snapshot + 100, 60, "100 pages more")
    # when Redis crashes and comes back from that snapshot: writes after it are gone
    redis_server.restart(crash=True)
    wait_all(nodes, timeout_s=120)
    # then every page was crawled, and the nodes said what happened
    assert missing_pages(web) == []
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]
    assert all("came back older than this node saw it" in node.log() for node in nodes)


def test_start_runs_again_when_redis_comes_back_older_than_its_end(
    redis_server: RedisServer, site: SiteFactory, project: Path, tmp_path: Path
) -> None:
    # given a node whose start() yields 20 pages slowly (one per 0.2 s), crawled one at a time
    # from a slower site (0.3 s a page): when start() ends, a third of its pages still wait
    web = site(20, delay_s=0.3)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      {"PAGES": "20", "CONCURRENT_REQUESTS": "1"}, project_dir=project,
                      spider="slowstart", env=node_env(tmp_path))
    # and a snapshot of Redis taken while start() is under way
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) == 20, 60, "start() to be exhausted")
    wait_until(lambda: start_done(redis_server, "slowstart"), 30, "Redis to hold start() done")
    assert pages_fetched(web) < 20  # some of start()'s requests are still queued
    # when Redis crashes and comes back from the snapshot (the end of start() is gone)
    redis_server.restart(crash=True)
    wait_all([node], timeout_s=120)
    # then the node ran start() again, and every page was crawled
    assert missing_pages(web) == []
    assert node.finish_reason() == "finished"
    assert "runs start() again" in node.log()


def test_a_node_frozen_longer_than_its_leases_loses_nothing_when_it_wakes(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling with 3-second leases
    web = site(400, delay_s=0.01)
    frozen, other = [start_node(name, redis_server.url, web.start_url, tmp_path)
                     for name in ("frozen", "other")]
    wait_until(lambda: sum(web.hits_by_agent().get("frozen", {}).values()) >= 40, 60,
               "the first node to crawl")
    # when one is frozen (SIGSTOP) for longer than its leases, then woken (SIGCONT)
    frozen.process.send_signal(signal.SIGSTOP)
    time.sleep(5)
    frozen.process.send_signal(signal.SIGCONT)
    wait_all([frozen, other], timeout_s=120)
    # then every page was crawled and both nodes ended the job normally
    assert missing_pages(web) == []
    assert [frozen.finish_reason(), other.finish_reason()] == ["finished", "finished"]


# ---- pages and items of callbacks and start() that did not end well -----------------------------

def test_a_page_whose_callback_raised_closespider_is_crawled_again_by_the_cluster(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """A chain of 20 pages (page i links to page i+1 only). The first node raises CloseSpider
    ("banned") in the callback of page 5, as spiders do when they see a ban page: that node
    stops, the cluster goes on with a second, healthy node. Page 5's callback never ran to its
    end (it yielded nothing), yet the scheduler acks it when the scrape Deferred fires
    (scheduler.py ClusterScheduler._scraped), so pages 6-19 are never crawled and the job
    ends "finished" with them missing."""
    web = site(20, links_per_page=1)
    banned = start_node("banned", redis_server.url, web.start_url, tmp_path, {"BANNED": "1"},
                        project_dir=fault_project, spider="banned", env=node_env(tmp_path))
    wait_all([banned], timeout_s=60)
    assert banned.finish_reason() == "banned"
    healthy = start_node("healthy", redis_server.url, web.start_url, tmp_path, {},
                         project_dir=fault_project, spider="banned", env=node_env(tmp_path))
    wait_all([healthy], timeout_s=60)
    assert healthy.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_a_retry_that_cannot_be_queued_does_not_ack_the_request_it_replaces(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
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
        "DOWNLOADER_MIDDLEWARES": '{"example.spiders.faults.ConnectionInMetaMiddleware": 950}'}
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, settings,
                      project_dir=fault_project, spider="follow", env=node_env(tmp_path))
    wait_all([node], timeout_s=60)
    assert node.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_an_item_yielded_by_start_goes_through_the_pipelines_even_if_its_node_is_killed(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """start() yields an item, then page 0. Scrapy sends start() items to the pipelines without
    waiting (ExecutionEngine._process_start_next -> Scraper._start_itemproc_nowait), and
    ClusterSpiderMiddleware.process_start marks start() exhausted ("S", start_done in Redis)
    as soon as the iteration ends, while that item is still in a slow pipeline. A kill -9
    then loses the item for good: start() is done, no node runs it again."""
    web = site(5)
    settings = {"SLOW_S": "10",
                "ITEM_PIPELINES": '{"example.spiders.faults.SlowStartItemsPipeline": 100}'}
    first = start_node("first", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=fault_project, spider="startitems", env=node_env(tmp_path))
    client = redis_server.client()
    wait_until(lambda: marks(tmp_path, "start_item_begun") == ["first"], 60,
               "start()'s item to be in the pipeline")
    time.sleep(1.0)  # far longer than a flush takes
    # start() is not done while its item is in the pipeline
    assert not client.hexists("clustersync:{startitems}:meta", "start_done")
    assert marks(tmp_path, "start_items") == []
    first.kill()
    second = start_node("second", redis_server.url, web.start_url, tmp_path,
                        {**settings, "SLOW_S": "0"}, project_dir=fault_project, spider="startitems",
                        env=node_env(tmp_path))
    wait_all([second], timeout_s=60)
    assert missing_pages(web) == []
    # the item start() yielded went through the pipelines at least once
    assert marks(tmp_path, "start_items") != []
