"""Where Scrapy tells the cluster that a leased request is done, and where start() runs once.

``ClusterSpiderMiddleware`` sits next to the engine (order 0): it sees the final output of every
callback, so it acks a request only after everything its callback yielded went to the
scheduler. ``ClusterDownloaderMiddleware`` (also order 0: it sees exceptions last) acks a request
whose download failed for good and that has no errback. Requests with an errback that failed,
and anything else that ends without passing here, are acked when the engine next goes idle.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from .codec import LEASE_META_KEY
from .scheduler import scheduler_for

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger(__name__)


def _token(message: Request | Response | None) -> str | None:
    if message is None:
        return None
    try:
        return message.meta.get(LEASE_META_KEY)
    except AttributeError:  # a response without a request
        return None


class _CrawlerMiddleware:
    """Both middlewares find the node's scheduler through their crawler."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)


class ClusterSpiderMiddleware(_CrawlerMiddleware):
    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        scheduler = scheduler_for(self.crawler)
        if scheduler is not None and not scheduler.runs_start:
            return
        async for item_or_request in start:
            yield item_or_request
        if scheduler is not None:
            scheduler.start_exhausted()

    def process_spider_input(self, response: Response, spider: Spider | None = None) -> None:
        scheduler = scheduler_for(self.crawler)
        if scheduler is not None:
            scheduler.callback_started(_token(response))

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterable[Any]:
        try:
            yield from result
        finally:
            self._done(response)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        try:
            async for item_or_request in result:
                yield item_or_request
        finally:
            self._done(response)

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Spider | None = None
    ) -> None:
        self._done(response)

    def _done(self, response: Response) -> None:
        scheduler = scheduler_for(self.crawler)
        if scheduler is not None:
            scheduler.ack(_token(response))


class ClusterDownloaderMiddleware(_CrawlerMiddleware):
    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        scheduler = scheduler_for(self.crawler)
        if scheduler is not None and request.errback is None:
            scheduler.ack(_token(request))
