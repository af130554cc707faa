"""Where start() runs once per job: ``ClusterSpiderMiddleware.process_start``.

The node that claimed the job's start() when it joined iterates it and tells the job when it is
exhausted. Every other node waits (crawling from the shared queue meanwhile) until start() is
done, and runs it itself if the claiming node stops before that (its claim is taken over).
Acks are not decided here: see scheduler.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .scheduler import scheduler_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class ClusterSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        scheduler = scheduler_for(self.crawler)
        if scheduler is not None and not scheduler.runs_start \
                and not await scheduler.wait_for_start():
            return
        async for item_or_request in start:
            yield item_or_request
        if scheduler is not None:
            scheduler.start_exhausted()
