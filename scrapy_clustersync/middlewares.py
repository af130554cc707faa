"""Where start() runs once per job: ``ClusterSpiderMiddleware.process_start``.

It is the spider middleware nearest the engine (the add-on installs it at ``ORDER``), so what
it yields goes straight to the engine, after every other middleware's ``process_start``. See
startrun.py for when this node runs start() and when start() is done. Acks are not decided
here: see scheduler.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .signals import node_opened

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from .scheduler import ClusterScheduler
    from .startrun import StartRun

#: nearest the engine: below any order a project gives its own spider middlewares
ORDER = -(10**9)


class ClusterSpiderMiddleware:
    """Runs the spider's start() only where the job's ``StartRun`` says (see startrun.py)."""

    def __init__(self) -> None:
        self.run: StartRun | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls()
        crawler.signals.connect(middleware.node_opened, signal=node_opened)
        return middleware

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.run = scheduler.start

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
        except Exception:
            run.ended()  # as in Scrapy, a start() that raises is over (reason start_error)
            raise
        run.ended()
