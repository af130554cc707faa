"""Where start() runs once per job: ``ClusterSpiderMiddleware.process_start``.

It is the spider middleware nearest the engine (the add-on installs it at ``ORDER``), so what
it yields goes straight to the engine, after every other middleware's ``process_start``. See
startrun.py for when this node runs start() and when start() is done. Acks are not decided
here: see scheduler.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .scheduler import scheduler_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

#: nearest the engine: below any order a project gives its own spider middlewares
ORDER = -(10**9)


class ClusterSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        scheduler = scheduler_for(self.crawler)
        run = scheduler.start if scheduler is not None else None
        if run is None:
            async for item_or_request in start:
                yield item_or_request
            return
        if not await run.begin():
            return
        try:
            async for item_or_request in start:
                run.yielded(item_or_request)
                yield item_or_request
        except Exception:
            run.ended()  # as in Scrapy, a start() that raises is over (reason start_error)
            raise
        run.ended()
