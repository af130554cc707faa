"""How a crawl ends: soon after its last page, as often idle and with the reason plain Scrapy
gives, while no node that may still produce work is cut off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    marks,
    missing_pages,
    node_env,
    pages_fetched_twice,
    project_with_spiders,
    start_node,
    wait_all,
)

#: the add-on's own defaults for closing, not the test suite's fast ones
DEFAULT_CLOSING = {
    "CLUSTERSYNC_IDLE_CLOSE_AFTER": "0.5",
    "CLUSTERSYNC_HEARTBEAT_INTERVAL": "1",
    "CLUSTERSYNC_LEASE_TIMEOUT": "60",
    # the time of each log line to the millisecond, as a Unix timestamp
    "LOG_FORMAT": "%(created).3f [%(name)s] %(levelname)s: %(message)s",
}

SPIDERS = """
    from scrapy import Request, Spider, signals
    from scrapy.exceptions import CloseSpider, DontCloseSpider

    from .helpers import mark


    class CloseOnIdle:
        '''Another extension: ends the crawl with its own reason the first time it is idle.'''

        def __init__(self):
            self.calls = 0

        @classmethod
        def from_crawler(cls, crawler):
            extension = cls()
            crawler.signals.connect(extension.spider_idle, signal=signals.spider_idle)
            return extension

        def spider_idle(self):
            self.calls += 1
            if self.calls == 1:
                raise CloseSpider("custom_reason")


    class OnePage(Spider):
        name = "one_page"

        def __init__(self, start_url="", **kwargs):
            super().__init__(**kwargs)
            self.start_url = start_url

        async def start(self):
            yield Request(self.start_url)

        def parse(self, response):
            yield {"url": response.url}


    class CustomReason(OnePage):
        name = "custom_reason"
        custom_settings = {"EXTENSIONS": {"example.spiders.closing.CloseOnIdle": 500}}


    class BrokenStart(OnePage):
        name = "broken_start"

        async def start(self):
            yield Request(self.start_url)
            raise ValueError("start() broke")


    class IdleOnce(OnePage):
        '''Keeps itself open once, with one more request, as in Scrapy's own engine tests.'''

        name = "idle_once"
        idle_calls = 0

        @classmethod
        def from_crawler(cls, crawler, *args, **kwargs):
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.idle, signal=signals.spider_idle)
            return spider

        def idle(self):
            self.idle_calls += 1
            mark("idle", str(self.idle_calls))
            if self.idle_calls == 1:
                self.crawler.engine.crawl(
                    Request(self.start_url, dont_filter=True, callback=self.again))
                raise DontCloseSpider

        def again(self, response):
            mark("again", response.url)


    class MoreOnIdle(OnePage):
        '''Crawls the start page, then, when first idle, the site's other pages.'''

        name = "more_on_idle"
        pages = 30
        idle_calls = 0

        @classmethod
        def from_crawler(cls, crawler, *args, **kwargs):
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.idle, signal=signals.spider_idle)
            return spider

        def idle(self):
            self.idle_calls += 1
            if self.idle_calls == 1:
                for i in range(1, self.pages):
                    self.crawler.engine.crawl(Request(self.start_url.replace("/0.", f"/{i}.")))
                raise DontCloseSpider
"""


def logged_at(log: str, text: str) -> float:
    """time.monotonic() of the last log line holding ``text`` (logged as a Unix timestamp)."""
    lines = [line for line in log.splitlines() if text in line]
    assert lines, f"{text!r} was never logged:\n{log[-2000:]}"
    return float(lines[-1].split(" ", 1)[0]) - (time.time() - time.monotonic())


@pytest.mark.timing
def test_a_one_node_one_page_crawl_closes_within_two_seconds_of_its_page(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a site of one page and one node with the add-on's default settings
    web = site(1)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, DEFAULT_CLOSING)
    # when it crawls the page
    wait_all([node], timeout_s=60)
    # then "Spider closed" comes within 2 s of the page's fetch, and the reason is finished
    last_page = web.agent_hits("node1").last
    assert last_page is not None
    assert logged_at(node.log(), "Spider closed") - last_page < 2.0
    assert node.finish_reason() == "finished"


def _crawl_alone(spider: str, redis: RedisServer, web: SiteFactory, tmp_path: Path) -> Path:
    project = project_with_spiders(tmp_path, "closing", SPIDERS)
    node = start_node("node1", redis.url, web(1).start_url, tmp_path, DEFAULT_CLOSING,
                      project_dir=project, spider=spider, env=node_env(tmp_path))
    wait_all([node], timeout_s=60)
    return node.log_path


def test_a_close_reason_raised_by_another_extension_on_idle_is_the_one_the_node_closes_with(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given an extension that raises CloseSpider("custom_reason") the first time it is idle
    # when a node crawls with it
    log = _crawl_alone("custom_reason", redis_server, site, tmp_path).read_text()
    # then the crawl ends with that reason, not the add-on's
    assert "'finish_reason': 'custom_reason'" in log, log[-3000:]
    assert "Spider closed (custom_reason)" in log


def test_a_start_that_raised_ends_the_crawl_with_start_error(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a spider whose start() yields a request, then raises
    # when a node crawls with it
    log = _crawl_alone("broken_start", redis_server, site, tmp_path).read_text()
    # then the page is crawled and the crawl ends with Scrapy's start_error, as without the add-on
    assert "Spider closed (start_error)" in log, log[-3000:]
    assert "'item_scraped_count': 1" in log


def test_spider_idle_fires_as_often_as_in_plain_scrapy_for_a_spider_that_stays_open_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a spider that, when first idle, schedules one more request and raises
    # DontCloseSpider
    # when a node crawls with it
    log = _crawl_alone("idle_once", redis_server, site, tmp_path).read_text()
    # then spider_idle fired twice, as in plain Scrapy, the request was crawled in between and
    # the crawl ended finished
    assert marks(tmp_path, "idle") == ["1", "2"], log[-3000:]
    assert len(marks(tmp_path, "again")) == 1
    assert "Spider closed (finished)" in log


def test_pages_a_spider_idle_handler_schedules_once_the_job_is_finished_are_all_crawled(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes whose spider, when first idle, schedules the site's 29 other pages
    web = site(30)
    project = project_with_spiders(tmp_path, "closing", SPIDERS)
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path, DEFAULT_CLOSING,
                        project_dir=project, spider="more_on_idle", env=node_env(tmp_path))
             for name in ("node1", "node2")]
    # when they crawl (the idle handlers run once the job is finished, then the job goes on)
    wait_all(nodes, timeout_s=60)
    # then every page is fetched once and both nodes close finished
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]


# ---- a start() that raises ----------------------------------------------------------------------

def test_a_start_that_raises_does_not_hang_the_job_for_ever(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """start() yields page 0 and then raises. Plain Scrapy crawls what start() yielded and
    closes with reason "start_error". Here the node never calls start_exhausted() (the
    exception goes through ClusterSpiderMiddleware.process_start), the job's start() stays
    claimed by a live node, the heartbeat never says finished: the node runs for ever."""
    web = site(20)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, {},
                      project_dir=fault_project, spider="starterror", env=node_env(tmp_path))
    wait_all([node], timeout_s=60)
    assert missing_pages(web) == []
    assert node.finish_reason() in ("finished", "start_error")
