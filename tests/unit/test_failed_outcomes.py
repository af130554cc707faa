"""What the node records of a request that failed, learned from Scrapy's scraper
(plugin/lease_tracker.py, plugin/request_tasks.py): a download error, a filtered HTTP status, a
callback's exception; and what it does not (a request a downloader middleware ignored)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any
from urllib.parse import urlparse

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from scrapy_clustersync.plugin.lease_tracker import LeaseTracker
from scrapy_clustersync.plugin.request_tasks import TASK_META_KEY, push_of
from scrapy_clustersync.store.write_ops import Ack, Failed, Op, Push, TaskPush


class Scraper:
    """Scrapy's scraper, as far as the tracker wraps it."""

    def __init__(self) -> None:
        self.done: Deferred[None] = Deferred()
        self.output: list[Any] = []

    def enqueue_scrape(self, result: Any, request: Request) -> Deferred[None]:
        return self.done

    def handle_spider_error(self, failure: Any, request: Request, response: Any) -> None:
        pass

    async def call_spider_async(self, result: Any, request: Request) -> Any:
        return iter(self.output)

    async def handle_spider_output_async(self, result: Any, request: Request,
                                         response: Any) -> None:
        """Takes every item of a callback's or errback's output, as Scrapy's does."""
        if hasattr(result, "__aiter__"):
            self.handled = [each async for each in result]
        else:
            self.handled = list(result)


def scraped(result: Any, request: Request, scraper: Scraper, during: Any = None) -> list[Op]:
    """The ops the tracker submits for leased ``request`` once Scrapy is done with ``result``;
    ``during(scraper)`` runs while it is being scraped."""
    submitted: list[Op] = []
    tracker = LeaseTracker(lambda: submitted.append, Counter())
    tracker.watch(scraper)
    tracker.handed_out(request, "e1")
    scraper.enqueue_scrape(result, request)
    if during is not None:
        during(scraper)
    scraper.done.callback(None)
    return submitted


def errback_given(failure: Failure, request: Request) -> Any:
    """What Scrapy's scraper does with a failure: the errback, then its output handled."""
    async def errback(scraper: Scraper) -> None:
        output = await scraper.call_spider_async(failure, request)
        await scraper.handle_spider_output_async(output, request, failure)

    def run(scraper: Scraper) -> None:
        asyncio.run(errback(scraper))
    return run


def test_a_download_error_is_acked_as_failed_with_its_exception_and_attempts() -> None:
    request = Request("http://a/down", meta={"retry_times": 2}, errback=print)
    failure = Failure(ConnectionRefusedError("refused"))
    ops = scraped(failure, request, Scraper(), errback_given(failure, request))
    assert ops == [Failed("e1", "http://a/down", 0, "ConnectionRefusedError: refused", 3, True)]


def test_a_filtered_http_status_is_acked_as_failed_with_its_status() -> None:
    request = Request("http://a/gone")
    response = HtmlResponse("http://a/gone", status=404, request=request)
    failure = Failure(HttpError(response, "Ignoring non-200 response"))
    ops = scraped(response, request, Scraper(), errback_given(failure, request))
    assert ops == [Failed("e1", "http://a/gone", 404, "HTTP 404", 1, False)]


def test_a_callback_that_raises_fails_its_request_with_the_status_it_had() -> None:
    request = Request("http://a/1")
    response = HtmlResponse("http://a/1", status=200, request=request)

    def raising(scraper: Scraper) -> None:
        scraper.handle_spider_error(Failure(KeyError("price")), request, response)
    ops = scraped(response, request, Scraper(), raising)
    assert ops == [Failed("e1", "http://a/1", 200, "KeyError: 'price'", 1, False)]


def test_a_request_a_downloader_middleware_ignored_is_a_plain_ack() -> None:
    request = Request("http://elsewhere/")
    failure = Failure(IgnoreRequest("offsite"))
    ops = scraped(failure, request, Scraper(), errback_given(failure, request))
    assert ops == [Ack("e1")]


def test_an_errbacks_requests_join_the_failed_requests_task_unless_they_name_theirs() -> None:
    # given a failed request of task "t" whose errback yields two requests, one with a task
    request = Request("http://a/down", meta={TASK_META_KEY: "t"}, errback=print)
    scraper = Scraper()
    own = Request("http://a/own", meta={TASK_META_KEY: "u"})
    scraper.output = [Request("http://a/fallback"), own, {"item": 1}]
    failure = Failure(TimeoutError())
    # when the tracker watches the errback run
    scraped(failure, request, scraper, errback_given(failure, request))
    # then the first joins "t", the second keeps "u"
    assert scraper.handled == [*scraper.output]
    assert [r.meta.get(TASK_META_KEY) for r in scraper.handled[:2]] == ["t", "u"]


def test_a_callbacks_requests_inherit_its_task_where_the_scraper_takes_its_output() -> None:
    # given a request of task 7 whose callback's output (the spider middlewares' too) holds a
    # request, a request naming its own task and an item
    parent = Request("http://a/1", meta={TASK_META_KEY: 7})
    response = HtmlResponse("http://a/1", request=parent)
    children = [Request("http://a/2"), Request("http://a/3", meta={TASK_META_KEY: "x"})]

    async def output() -> Any:
        for each in (*children, {"item": 1}):
            yield each
    scraper = Scraper()
    scraped(response, parent, scraper, lambda scraper: asyncio.run(
        scraper.handle_spider_output_async(output(), parent, response)))
    # then the scraper got all of it, the first request joining 7, the second keeping "x"
    assert scraper.handled == [*children, {"item": 1}]
    assert [child.meta[TASK_META_KEY] for child in children] == [7, "x"]
    pushes = [push_of(child, b"f" * 20, 0, b"blob", 0) for child in children]
    assert pushes == [TaskPush(b"f" * 20, 0, b"blob", 0, urlparse(child.url).hostname or "",
                               task=task) for child, task in zip(children, ("7", "x"), strict=True)]


def test_a_request_without_a_task_or_with_no_usable_id_is_a_plain_push() -> None:
    for meta in ({}, {TASK_META_KEY: {"not": "an id"}}, {TASK_META_KEY: ""}):
        assert push_of(Request("http://a/", meta=meta), b"f" * 20, 0, b"b", 0) == Push(
            b"f" * 20, 0, b"b", 0, "a")
