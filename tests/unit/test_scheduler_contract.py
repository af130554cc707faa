"""ClusterScheduler behaves as Scrapy's scheduler: DUPEFILTER_CLASS, len(), stats, the
dupefilter's log, from_crawler before the spider exists."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, signals
from scrapy.dupefilters import RFPDupeFilter
from w3lib.url import url_query_cleaner

from scrapy_clustersync.plugin.cluster_dupefilter import ClusterDupeFilter
from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler
from scrapy_clustersync.store import Push

from .node_fakes import make_crawler, make_scheduler

BASE_DUPEFILTER = "scrapy.dupefilters.BaseDupeFilter"
QUERY_BLIND_DUPEFILTER = f"{__name__}.QueryBlindDupeFilter"


class QueryBlindDupeFilter(RFPDupeFilter):
    """A project's dupefilter: two URLs that differ only in their query string are one page."""

    opened = closed = 0

    def request_seen(self, request: Request) -> bool:
        return super().request_seen(request.replace(url=url_query_cleaner(request.url)))

    def open(self) -> None:
        type(self).opened += 1

    def close(self, reason: str) -> None:
        type(self).closed += 1


@pytest.fixture(autouse=True)
def fresh_counts() -> None:
    QueryBlindDupeFilter.opened = QueryBlindDupeFilter.closed = 0


def schedule(scheduler: ClusterScheduler, request: Request) -> None:
    """What Scrapy's engine does with a request a callback yielded (ExecutionEngine.
    _schedule_request): request_scheduled, enqueue_request, request_dropped if it said False."""
    crawler = scheduler.crawler
    crawler.signals.send_catch_log(signals.request_scheduled, request=request,
                                   spider=crawler.spider)
    if not scheduler.enqueue_request(request):
        crawler.signals.send_catch_log(signals.request_dropped, request=request,
                                       spider=crawler.spider)


def dropped_urls(scheduler: ClusterScheduler) -> list[str]:
    """The URLs request_dropped is sent for from now on, in order."""
    dropped: list[str] = []

    def on_dropped(request: Request, **kwargs: Any) -> None:
        dropped.append(request.url)

    scheduler.crawler.signals.connect(on_dropped, signal=signals.request_dropped, weak=False)
    return dropped


def stat(scheduler: ClusterScheduler, key: str) -> Any:
    scheduler.publish_counts()
    return scheduler.stats.get_value(key)


# ---- DUPEFILTER_CLASS ----------------------------------------------------------------------------


def test_with_base_dupefilter_the_same_url_is_queued_every_time(tmp_path: Path) -> None:
    # given a project whose DUPEFILTER_CLASS is BaseDupeFilter (dedup off, in Scrapy)
    scheduler, thread = make_scheduler(tmp_path, DUPEFILTER_CLASS=BASE_DUPEFILTER)
    # when the same URL is enqueued twice
    accepted = [scheduler.enqueue_request(Request("http://a/1")) for _ in range(2)]
    # then both go to Redis, past the job's dedup check
    assert accepted == [True, True]
    assert [(push.fingerprint, push.dont_filter) for push in thread.ops(Push)] == [(b"", True)] * 2


def test_a_projects_dupefilter_drops_its_duplicates_with_request_dropped(tmp_path: Path) -> None:
    # given a project whose dupefilter ignores the query string
    scheduler, thread = make_scheduler(tmp_path, DUPEFILTER_CLASS=QUERY_BLIND_DUPEFILTER)
    dropped = dropped_urls(scheduler)
    # when a callback yields one page under two query strings, as the engine schedules them
    schedule(scheduler, Request("http://a/1?session=1"))
    schedule(scheduler, Request("http://a/1?session=2"))
    # then the second is dropped, request_dropped says so, and only the first goes to Redis
    assert dropped == ["http://a/1?session=2"]
    assert len(thread.ops(Push)) == 1
    assert stat(scheduler, "dupefilter/filtered") == 1


def test_a_projects_dupefilter_is_the_schedulers_df_opened_and_closed_with_it(
    tmp_path: Path,
) -> None:
    # given a project with its own DUPEFILTER_CLASS
    # when its node opens, then closes
    scheduler, _ = make_scheduler(tmp_path, DUPEFILTER_CLASS=QUERY_BLIND_DUPEFILTER)
    scheduler.close("finished")
    # then the scheduler's df is that class, opened and closed once, as Scrapy's scheduler does
    assert isinstance(scheduler.df, QueryBlindDupeFilter)
    assert (QueryBlindDupeFilter.opened, QueryBlindDupeFilter.closed) == (1, 1)


@pytest.mark.parametrize("dupefilter_class", [
    "scrapy_clustersync.dupefilter.ClusterDupeFilter", "scrapy.dupefilters.RFPDupeFilter",
])
def test_with_the_default_dupefilter_df_is_the_clusters_own(
    tmp_path: Path, dupefilter_class: str,
) -> None:
    # given the add-on's DUPEFILTER_CLASS, or Scrapy's default set by the project
    # when the node opens
    scheduler, _ = make_scheduler(tmp_path, DUPEFILTER_CLASS=dupefilter_class)
    # then its df is the cluster's filter (no second, per-process set of fingerprints)
    assert scheduler.df is scheduler.dupefilter
    assert isinstance(scheduler.df, ClusterDupeFilter)


def test_the_projects_dupefilter_is_asked_again_after_redis_came_back_older(
    tmp_path: Path,
) -> None:
    # given a node with a query-blind dupefilter that sent a page
    scheduler, thread = make_scheduler(tmp_path, DUPEFILTER_CLASS=QUERY_BLIND_DUPEFILTER)
    scheduler.enqueue_request(Request("http://a/1?session=1"))
    # when Redis came back older (it may have lost that push) and the page comes again
    thread.rollback_count = 1
    accepted = scheduler.enqueue_request(Request("http://a/1?session=2"))
    # then it goes to Redis again: a filter remembering the lost push would lose the page
    assert accepted is True
    assert len(thread.ops(Push)) == 2


def test_the_clusters_duplicate_log_line_is_scrapys_with_the_referer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    # given a node with DUPEFILTER_DEBUG that sent a page
    scheduler, _ = make_scheduler(tmp_path, DUPEFILTER_DEBUG=True)
    scheduler.enqueue_request(Request("http://a/1"))
    # when a link to it is found on another page
    with caplog.at_level(logging.DEBUG, logger="scrapy.dupefilters"):
        scheduler.enqueue_request(Request("http://a/1", headers={"Referer": "http://a/list"}))
    # then the line is Scrapy's, under Scrapy's dupefilter logger
    [record] = [r for r in caplog.records if r.name == "scrapy.dupefilters"]
    assert record.getMessage() == ("Filtered duplicate request: <GET http://a/1> "
                                   "(referer: http://a/list)")


# ---- len(), has_pending_requests(), stats -------------------------------------------------------


def test_an_enqueued_request_is_pending_until_it_is_in_redis(tmp_path: Path) -> None:
    # given an open node with nothing to do
    scheduler, thread = make_scheduler(tmp_path)
    # when the engine enqueues a request
    scheduler.enqueue_request(Request("http://a/1"))
    # then it is pending on this node, as in Scrapy's scheduler, until Redis has it
    assert scheduler.has_pending_requests() and len(scheduler) == 1
    thread.flush()
    assert not scheduler.has_pending_requests() and len(scheduler) == 0


def test_scrapys_scheduler_stats_count_what_went_through_redis(tmp_path: Path) -> None:
    # given a node that enqueued two requests
    scheduler, thread = make_scheduler(tmp_path)
    for url in ("http://a/1", "http://a/2"):
        scheduler.enqueue_request(Request(url))
    # when Redis leases one of them back and the engine takes it
    thread.leased.append(("e1", scheduler.codec.encode(Request("http://a/1"))))
    scheduler.next_request()
    # then Scrapy's scheduler stats say so, the Redis queue counted as their "/redis" part
    assert {key: stat(scheduler, key) for key in (
        "scheduler/enqueued", "scheduler/enqueued/redis",
        "scheduler/dequeued", "scheduler/dequeued/redis",
    )} == {"scheduler/enqueued": 2, "scheduler/enqueued/redis": 2,
           "scheduler/dequeued": 1, "scheduler/dequeued/redis": 1}


def test_a_request_kept_on_the_node_counts_as_scrapys_memory_queue(tmp_path: Path) -> None:
    # given a leased request replaced by one that cannot travel (its callback is no method)
    scheduler, thread = make_scheduler(tmp_path)
    thread.leased.append(("e1", scheduler.codec.encode(Request("http://a/1"))))
    leased = scheduler.next_request()
    assert leased is not None
    scheduler.enqueue_request(leased.replace(url="http://a/2", callback=lambda response: None))
    # when the engine takes it
    scheduler.next_request()
    # then it is counted under "/memory", the leased one under "/redis"
    assert stat(scheduler, "scheduler/enqueued/memory") == 1
    assert stat(scheduler, "scheduler/dequeued/memory") == 1
    assert stat(scheduler, "scheduler/dequeued") == 2


# ---- from_crawler --------------------------------------------------------------------------------


def test_from_crawler_builds_the_scheduler_before_the_spider_exists(tmp_path: Path) -> None:
    # given a crawler whose spider is not created yet (Scrapy's own scheduler tests do this)
    crawler = make_crawler(CLUSTERSYNC_SPOOL_DIR=str(tmp_path),
                           DUPEFILTER_CLASS=QUERY_BLIND_DUPEFILTER)
    crawler.spider = None
    # when the scheduler is built from it
    scheduler = ClusterScheduler.from_crawler(crawler)
    # then it is, for the spider's job, with the project's dupefilter as its df
    assert scheduler.config.job == "listing"
    assert isinstance(scheduler.df, QueryBlindDupeFilter)


def test_a_duplicate_dropped_on_the_node_is_not_pending_work(tmp_path: Path) -> None:
    # given a node that enqueued a request Redis has taken
    scheduler, thread = make_scheduler(tmp_path)
    scheduler.enqueue_request(Request("http://a/1"))
    thread.flush()
    # when a request is then filtered on the node
    scheduler.enqueue_request(Request("http://a/1"))
    # then nothing is pending: a duplicate is not work
    assert not scheduler.has_pending_requests()
