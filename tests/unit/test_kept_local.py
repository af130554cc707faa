"""A request that cannot travel is crawled on the node that made it, as Scrapy keeps the requests
it cannot serialize in memory: never dropped, counted, warned about once per kind."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler
from scrapy_clustersync.store import Ack, Push

from .node_fakes import FakeRedisThread, fake_engine, make_scheduler

SMALL_CAP: dict[str, Any] = {"CLUSTERSYNC_MAX_REQUEST_BYTES": 2048}
#: a lambda callback, as spiders write them
A_LAMBDA: Callable[[Any], None] = lambda response: None  # noqa: E731


class SessionRequest(Request):
    """A user's Request subclass that is not in CLUSTERSYNC_REQUEST_CLASSES."""


def on_page(response: Any, page: int) -> None:
    """A plain function: another node could not find it on its spider."""


def cannot_travel(kind: str) -> Request:
    """A request Scrapy crawls but that cannot be queued in Redis, for each reason there is."""
    if kind == "lambda callback":
        return Request("http://a/lambda", callback=A_LAMBDA)
    if kind == "functools.partial callback":
        return Request("http://a/partial", callback=functools.partial(on_page, page=2))
    if kind == "Request subclass not allowed":
        return SessionRequest("http://a/session")
    if kind == "open file in meta":
        return Request("http://a/file", meta={"log": open(__file__)})  # noqa: SIM115
    assert kind == "body over the cap"
    return Request("http://a/big", method="POST", body=b"x" * 4096)


KINDS = ["lambda callback", "functools.partial callback", "Request subclass not allowed",
         "open file in meta", "body over the cap"]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def unserializable(scheduler: ClusterScheduler) -> Any:
    scheduler.publish_counts()
    return scheduler.stats.get_value("scheduler/unserializable")


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_that_cannot_travel_is_crawled_on_this_node_and_counted(
    tmp_path: Path, kind: str
) -> None:
    # given an open node
    scheduler, thread = make_scheduler(tmp_path, **SMALL_CAP)
    request = cannot_travel(kind)
    # when the engine enqueues a request that cannot be queued in Redis
    accepted = scheduler.enqueue_request(request)
    # then it is accepted (not dropped), nothing goes to Redis, the engine gets it next,
    # and it counts in the stat Scrapy uses for requests it keeps in memory
    assert accepted is True
    assert thread.ops(Push) == []
    assert scheduler.has_pending_requests()
    assert scheduler.next_request() is request
    assert unserializable(scheduler) == 1


def test_each_kind_of_request_that_cannot_travel_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a node
    scheduler, thread = make_scheduler(tmp_path, **SMALL_CAP)
    # when three lambda-callback requests and two oversized ones are enqueued
    with caplog.at_level(logging.WARNING):
        for n in range(3):
            scheduler.enqueue_request(Request(f"http://a/l{n}", callback=A_LAMBDA))
        for n in range(2):
            scheduler.enqueue_request(Request(f"http://a/b{n}", method="POST", body=b"x" * 4096))
    # then there is one warning per kind, in Scrapy's words for a request it cannot
    # serialize, saying the request is not crash-safe, and all five are counted and crawled here
    [callbacks, size] = warnings_of(caplog)
    assert callbacks.startswith("Unable to serialize request: <GET http://a/l0> - reason: ")
    assert size.startswith("Unable to serialize request: <POST http://a/b0> - reason: ")
    assert "http://a/l0" in callbacks and "must be methods of the spider" in callbacks
    assert "http://a/b0" in size and "CLUSTERSYNC_MAX_REQUEST_BYTES" in size
    assert all("not crash-safe" in warning for warning in (callbacks, size))
    assert unserializable(scheduler) == 5
    assert [scheduler.next_request() is not None for _ in range(5)] == [True] * 5


def test_a_node_holding_a_request_that_cannot_travel_does_not_report_idle(
    tmp_path: Path,
) -> None:
    # given a node whose engine went idle (it told the cluster so)
    scheduler, thread = make_scheduler(tmp_path)
    scheduler.engine_idle()
    assert thread.idle is True
    # when a request that cannot travel is enqueued (start() yields one, say)
    scheduler.enqueue_request(cannot_travel("lambda callback"))
    # then the node is busy, and tells the engine it has a request pending
    assert thread.idle is False
    assert scheduler.has_pending_requests() and len(scheduler) == 1


def test_a_duplicate_of_a_request_kept_here_is_filtered(tmp_path: Path) -> None:
    scheduler, thread = make_scheduler(tmp_path)
    callback = functools.partial(on_page, page=1)
    assert scheduler.enqueue_request(Request("http://a/same", callback=callback)) is True
    assert scheduler.enqueue_request(Request("http://a/same", callback=callback)) is False
    assert len(scheduler) == 1


def test_a_child_kept_here_does_not_end_its_parents_lease(tmp_path: Path) -> None:
    # given a leased request whose response is in the scraper
    scheduler, thread = make_scheduler(tmp_path)
    thread.leased.append(("e1", scheduler.codec.encode(Request("http://a/parent"))))
    parent = scheduler.next_request()
    assert parent is not None
    scraper = fake_engine(scheduler).scraper
    scraper.enqueue_scrape(None, parent)
    # when its callback yields a child that cannot travel, its meta copied from the parent's
    child = Request("http://a/child", meta=dict(parent.meta), callback=A_LAMBDA)
    scheduler.enqueue_request(child)
    kept = scheduler.next_request()
    assert kept is child
    # and the child is crawled and scraped before the parent's callback is done
    scraper.enqueue_scrape(None, child)
    scraper.scraping[child.url].callback(None)
    # then the parent is still leased (acked only once its own callback is done)
    assert thread.ops(Ack) == []
    scraper.scraping[parent.url].callback(None)
    assert thread.ops(Ack) == [Ack("e1")]


def test_a_node_reports_how_many_requests_it_kept_to_the_cluster(tmp_path: Path) -> None:
    # given a node that kept two requests that cannot travel
    thread = FakeRedisThread()
    scheduler, _ = make_scheduler(tmp_path, thread)
    for kind in ("lambda callback", "Request subclass not allowed"):
        scheduler.enqueue_request(cannot_travel(kind))
    # when its figures are published (the heartbeat's node record is built from the stats)
    scheduler.publish_counts()
    # then the record the heartbeat sends counts them
    assert thread.node_info()["unserializable"] == 2
