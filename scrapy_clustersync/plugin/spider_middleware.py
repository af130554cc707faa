"""Where start() runs once per job: ``ClusterSpiderMiddleware.process_start``.

It is the spider middleware nearest the engine (the add-on installs it at ``ORDER``), so what
it yields goes straight to the engine, after every other middleware's ``process_start``. See
node/start_run.py for when this node runs start() and when start() is done. Acks are not decided
here: see scheduler.py. It has no ``process_spider_output``: a callback's requests join its task
where the scraper takes the output of every middleware (lease_tracker.py), so a crawl pays no
middleware layer per item for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.defer import maybe_deferred_to_future

from .signals import node_opened

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from ..node.start_run import StartRun
    from .cluster_scheduler import ClusterScheduler

#: nearest the engine: below any order a project gives its own spider middlewares
ORDER = -(10**9)


class ClusterSpiderMiddleware:
    """Runs the spider's start() only where the job's ``StartRun`` says (see node/start_run.py)."""

    def __init__(self) -> None:
        self.run: StartRun | None = None
        self.node: ClusterScheduler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls()
        crawler.signals.connect(middleware.node_opened, signal=node_opened)
        return middleware

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.run = scheduler.start
        self.node = scheduler

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        run = self.run
        if run is None:
            async for item_or_request in start:
                yield item_or_request
            return
        if not await run.begin():
            return
        results = self.node.results if self.node is not None else None
        position = 0  # of the items start() yields: their result ids are start:<position>
        try:
            async for item_or_request in start:
                run.yielded(item_or_request)
                if results is not None and not isinstance(item_or_request, Request):
                    results.start_item(item_or_request, position)
                    position += 1
                yield item_or_request
                await self._sent(item_or_request)
        except Exception:
            run.ended()  # as in Scrapy, a start() that raises is over (reason start_error)
            raise
        run.ended()

    async def _sent(self, item_or_request: Any) -> None:
        """Go on with start() once the engine could send the request it yielded, as in Scrapy
        (``ClusterScheduler.own_requests_sent``); the reactor does not wait meanwhile."""
        sent = self.node.own_requests_sent() if self.node is not None and isinstance(
            item_or_request, Request) else None
        if sent is not None:
            await maybe_deferred_to_future(sent)
