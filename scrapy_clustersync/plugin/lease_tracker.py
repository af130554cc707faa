"""LeaseTracker: the leased requests a node handed to Scrapy's engine, until each is settled.

When is a leased request done? Scrapy's scraper takes every downloaded response (or download
failure) through ``Scraper.enqueue_scrape``, whose Deferred fires only once the callback (or
errback, or a spider middleware's ``process_spider_exception``) has been run to its end and
*every* request it yielded has gone through ``engine.crawl()`` (so through
``enqueue_request``, which buffers it) and every item has been through the item pipelines.
That is what Scrapy itself waits for before it calls a spider idle, whatever the reactor and
however long the output. The ack is buffered then, behind all of those pushes in the one
ordered write stream, so Redis never holds the ack without the children.
A request replaced in the downloader (redirect, retry) is acked once its replacement is
buffered (``ClusterScheduler.enqueue_request`` asks ``replaced_in_downloader``).

A request that failed (request_tasks.py: what counts) is acked the same way, at the same moment,
with a ``Failed`` op that also records why: the tracker learns it from what Scrapy hands the
errback (``Scraper.call_spider_async`` with a Failure) and from ``handle_spider_error``.

The requests a callback or errback yields join its request's task here too, where Scrapy hands
their output, after every spider middleware, to ``Scraper.handle_spider_output_async``: the
output of a request without a task is passed on untouched, at no cost per item.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.exceptions import CloseSpider
from twisted.python.failure import Failure

from ..codec import LEASE_META_KEY
from ..store.write_ops import Ack, Op, Release
from .request_tasks import (
    TASK_META_KEY,
    RequestFailure,
    download_failure,
    inherit_task,
    spider_failure,
)

logger = logging.getLogger(__name__)


class LeaseTracker:
    """Which leased requests are under way on this node, and their ack or release.

    ``submit`` buffers an op in the node's ordered write stream (None before the node joined:
    nothing is leased then); ``counts`` gathers the ``clustersync/*`` stats.
    """

    def __init__(self, submit: Callable[[], Callable[[Op], None] | None],
                 counts: Counter[str]) -> None:
        self._submit = submit
        self.counts = counts
        #: leased requests handed to the engine and not settled yet
        self.inflight: set[str] = set()
        #: of those, the ones whose response (or failure) is in Scrapy's scraper right now
        self.scraping: set[str] = set()
        #: of those, the ones whose callback raised CloseSpider: released, not acked
        self._hand_back: set[str] = set()
        #: of those, the ones that failed, with why and the request (acked with a Failed op)
        self._failures: dict[str, tuple[RequestFailure, Request]] = {}
        #: gives the op that settles a lease the results it carries (result_collector.py:
        #: ``ResultCollector.attach``); as it is without results
        self.attach: Callable[[Op, Request | None], Op] = _as_it_is

    def handed_out(self, request: Request, entry_id: str) -> None:
        """``request``, leased as ``entry_id``, goes to the engine."""
        request.meta[LEASE_META_KEY] = entry_id
        self.inflight.add(entry_id)

    @property
    def downloading(self) -> bool:
        """Some request under way is not in the scraper: it is being downloaded."""
        return len(self.inflight) != len(self.scraping)

    def replaced_in_downloader(self, request: Request) -> str | None:
        """The lease ``request`` replaces, if a redirect or retry made it from a leased request
        that is not being scraped (a child whose meta was copied from its parent's response
        comes while the parent is scraped, and replaces nothing)."""
        token = request.meta.get(LEASE_META_KEY)
        return token if token in self.inflight and token not in self.scraping else None

    def ack(self, token: str | None) -> None:
        """The leased request ``token`` is done; what it produced was buffered before this."""
        self._settle(token, Ack, "clustersync/acked")

    def release(self, token: str) -> None:
        """Hand the leased request ``token`` back to the queue, for any node to crawl again."""
        self._settle(token, Release, "clustersync/handed_back")

    def _settle(self, token: str | None, op: Callable[[str], Op], stat: str,
                request: Request | None = None) -> None:
        submit = self._submit()
        if token not in self.inflight or submit is None:
            return
        self.inflight.discard(token)
        submit(self.attach(op(token), request))
        self.counts[stat] += 1

    def _failed(self, request: Request, failure: RequestFailure | None) -> None:
        """``request``, being scraped, failed: the first reason found is the one recorded."""
        token = request.meta.get(LEASE_META_KEY)
        if failure is not None and token in self.scraping and token not in self._failures:
            self._failures[token] = (failure, request)

    def engine_idle(self) -> None:
        """The engine has nothing in progress: a request still under way then ended without
        reaching the scraper (a replacement that a ``request_scheduled`` handler ignored), and
        everything it led to is buffered, so it is acked."""
        for token in sorted(self.inflight - self.scraping):
            self.counts["clustersync/acked_on_idle"] += 1
            self.ack(token)

    def watch(self, scraper: Any) -> None:
        """Learn from Scrapy's ``scraper`` when it has finished with each response or failure
        (see the module doc). Without one (no crawl, or a test's ``Mock``) leased requests are
        acked when the node goes idle."""
        # looked up on the class: a Mock's attributes are made up on the instance
        if not callable(getattr(type(scraper), "enqueue_scrape", None)):
            logger.debug("clustersync: no Scrapy scraper to watch; leased requests are acked "
                         "when the node goes idle")
            return
        enqueue_scrape = scraper.enqueue_scrape

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
        self._watch_spider_errors(scraper)
        self._watch_errbacks(scraper)
        _watch_output(scraper)

    def _watch_spider_errors(self, scraper: Any) -> None:
        """Learn each exception of a callback or errback: CloseSpider hands the request back,
        any other fails it."""
        handle_spider_error = scraper.handle_spider_error

        def watched_error(failure: Any, request: Request, *args: Any, **kwargs: Any) -> Any:
            token = request.meta.get(LEASE_META_KEY)
            if isinstance(failure.value, CloseSpider):
                if token in self.scraping:
                    self._hand_back.add(token)
            else:
                response = args[0] if args else kwargs.get("response")
                self._failed(request, spider_failure(failure, response))
            return handle_spider_error(failure, request, *args, **kwargs)

        scraper.handle_spider_error = watched_error

    def _watch_errbacks(self, scraper: Any) -> None:
        """Learn each Failure Scrapy hands a request's errback (or raises without one): a
        download error, or an exception of a spider middleware's ``process_spider_input`` such
        as ``HttpError``."""
        call_spider = getattr(scraper, "call_spider_async", None)
        if call_spider is None:  # pragma: no cover - Scrapy >= 2.13 has it
            return

        # a plain function handing on Scrapy's coroutine: no coroutine of its own per page
        def watched_call(result: Any, request: Request, *args: Any, **kwargs: Any) -> Any:
            if isinstance(result, Failure):
                self._failed(request, download_failure(result, request))
            return call_spider(result, request, *args, **kwargs)

        scraper.call_spider_async = watched_call

    def _scraped(self, result: Any, token: str) -> Any:
        """Everything the callback or errback of ``token`` produced has been buffered.

        A callback that raised CloseSpider did not run to its end: its request is handed back
        to the queue for another node, not acked (the node closes, as the spider asked).
        """
        self.scraping.discard(token)
        failed = self._failures.pop(token, None)
        if token in self._hand_back:
            self._hand_back.discard(token)
            self.release(token)
        elif failed is not None:
            failure, request = failed
            self.counts["clustersync/failed"] += 1
            self._settle(token, lambda entry_id: failure.op(entry_id, request),
                         "clustersync/acked", request)
        else:
            self.ack(token)
        return result


def _as_it_is(op: Op, request: Request | None) -> Op:
    return op


def _watch_output(scraper: Any) -> None:
    """Give the requests in each callback's or errback's output (its requests, and those the
    spider middlewares added or passed on) the task of the request it answers, unless they name
    their own: Scrapy hands every such output to ``handle_spider_output_async``, the errbacks'
    of download failures too, which no spider middleware sees."""
    handle_output = getattr(scraper, "handle_spider_output_async", None)
    if handle_output is None:  # pragma: no cover - Scrapy >= 2.13 has it
        return

    # a plain function handing on Scrapy's coroutine (awaited by Scrapy): none of its own per page
    def watched_output(result: Any, request: Request, *args: Any, **kwargs: Any) -> Any:
        return handle_output(_joining_task(request, result), request, *args, **kwargs)

    scraper.handle_spider_output_async = watched_output


def _joining_task(parent: Request, output: Any) -> Any:
    """``output`` (an iterable or async iterable of an errback), its requests joining
    ``parent``'s task."""
    if parent.meta.get(TASK_META_KEY) is None or output is None:
        return output
    if hasattr(output, "__aiter__"):
        async def joined_async() -> Any:
            async for each in output:
                inherit_task(parent, each)
                yield each
        return joined_async()

    def joined() -> Any:
        for each in output:
            inherit_task(parent, each)
            yield each
    return joined()
