"""Where start() runs once per job: ``ClusterSpiderMiddleware.process_start``; and how a
callback's requests inherit its task: ``process_spider_output``.

It is the spider middleware nearest the engine (the add-on installs it at ``ORDER``), so what
it yields goes straight to the engine, after every other middleware's ``process_start``. See
node/start_run.py for when this node runs start() and when start() is done. Acks are not decided
here: see scheduler.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.defer import maybe_deferred_to_future

from .request_tasks import TASK_META_KEY, inherit_task
from .signals import node_opened

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from ..node.start_run import StartRun
    from .cluster_scheduler import ClusterScheduler

#: nearest the engine: below any order a project gives its own spider middlewares
ORDER = -(10**9)


class ClusterSpiderMiddleware:
    """Runs the spider's start() only where the job's ``StartRun`` says (see node/start_run.py), and
    gives the requests a callback yields the task of its request (request_tasks.py)."""

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
        try:
            async for item_or_request in start:
                run.yielded(item_or_request)
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

    async def process_spider_output(self, response: Any, result: AsyncIterator[Any]
                                    ) -> AsyncIterator[Any]:
        """The callback's output; its requests join the task of ``response``'s request unless
        they name their own (nearest the engine: also those other middlewares add)."""
        request = getattr(response, "request", None)
        if request is None or TASK_META_KEY not in request.meta:
            async for each in result:
                yield each
            return
        async for each in result:
            inherit_task(request, each)
            yield each
