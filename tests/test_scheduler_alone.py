"""A scheduler built and opened for a crawler that never started a crawl, as Scrapy's own
scheduler tests build one (tests/test_scheduler.py: a Mock engine, stats, nothing else)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.statscollectors import MemoryStatsCollector

from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler
from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

URLS = ["http://a/1", "http://a/2", "http://a/3"]


def crawler_without_a_crawl(redis_url: str, tmp_path: Path, engine: Any) -> Crawler:
    """A crawler whose crawl never started: no request fingerprinter; ``engine`` as given."""
    crawler = Crawler(Spider, {"CLUSTERSYNC_REDIS_URL": redis_url, "CLUSTERSYNC_JOB": "alone",
                               "CLUSTERSYNC_SPOOL_DIR": str(tmp_path / "spool")})
    if engine is not None:
        crawler.engine = engine
    crawler.stats = MemoryStatsCollector(crawler)
    return crawler


@pytest.mark.parametrize("engine", [Mock(), None], ids=["a Mock engine", "no engine"])
def test_a_scheduler_of_a_crawler_that_never_started_queues_each_request_once(
    redis_server: RedisServer, tmp_path: Path, engine: Any
) -> None:
    # given a scheduler built from a crawler that never started a crawl, and opened
    crawler = crawler_without_a_crawl(redis_server.url, tmp_path, engine)
    scheduler = ClusterScheduler.from_crawler(crawler)
    scheduler.open(Spider.from_crawler(crawler, name="alone"))
    # when it is given three requests and a duplicate of the first
    try:
        taken = [scheduler.enqueue_request(Request(url)) for url in URLS]
        duplicate = scheduler.enqueue_request(Request(URLS[0]))
        held = len(scheduler)
    finally:
        scheduler.close("finished")
    # then it takes the three, drops the duplicate, and the three reach the job's queue
    assert taken == [True, True, True] and duplicate is False
    assert held == 3
    assert JobStore(make_client(redis_server.url), "alone", "test").status().queued == 3


def test_a_scheduler_called_directly_hands_out_every_request_it_holds_in_priority_order(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a scheduler opened with no crawl running, as Scrapy's own scheduler tests drive one
    crawler = crawler_without_a_crawl(redis_server.url, tmp_path, None)
    scheduler = ClusterScheduler.from_crawler(crawler)
    scheduler.open(Spider.from_crawler(crawler, name="alone"))
    # when it is given three requests and asked for requests while it has any
    try:
        for priority, url in enumerate(URLS):
            scheduler.enqueue_request(Request(url, priority=priority))
        taken = []
        while scheduler.has_pending_requests():
            request = scheduler.next_request()
            assert request is not None
            taken.append(request.url)
    finally:
        scheduler.close("finished")
    # then it hands out each one, highest priority first, as Scrapy's scheduler does
    assert taken == URLS[::-1]
