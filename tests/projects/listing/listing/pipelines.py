"""An item pipeline that awaits I/O for every item (a database write, say), as many do."""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

try:  # Scrapy >= 2.18: asyncio.sleep or deferLater, whichever reactor runs
    from scrapy.utils.asyncio import sleep
except ImportError:  # pragma: no cover - older Scrapy
    from scrapy.utils.defer import maybe_deferred_to_future
    from twisted.internet import reactor, task

    async def sleep(seconds: float) -> None:
        await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class SlowAsyncPipeline:
    """Waits ``PIPELINE_DELAY`` seconds per item; then notes it in ``LISTING_ITEMS_FILE``, if set.

    The file is line-buffered and appended to, so a node killed with SIGKILL loses no line of
    an item it had finished.
    """

    def __init__(self, delay_s: float, items_file: str) -> None:
        self.delay_s = delay_s
        self.items_path = Path(items_file) if items_file else None
        self.items_file: IO[str] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        return cls(settings.getfloat("PIPELINE_DELAY"), settings.get("LISTING_ITEMS_FILE", ""))

    def open_spider(self) -> None:
        if self.items_path is not None:
            self.items_file = self.items_path.open("a", buffering=1)

    def close_spider(self) -> None:
        if self.items_file is not None:
            self.items_file.close()

    async def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        await sleep(self.delay_s)
        if self.items_file is not None:
            self.items_file.write(f"{item['page']} {item['position']}\n")
        return item
