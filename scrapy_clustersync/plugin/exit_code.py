"""ExitCode: ``scrapy crawl`` exits non-zero when the node stopped for a clustersync reason.

Scrapy 2.19 has one way for a crawl to set the exit code of ``scrapy crawl``:
``CrawlerProcess.bootstrap_failed``, which its runners set when the crawler has no spider once
its crawl is over (scrapy/crawler.py, ``AsyncCrawlerRunner._done`` and ``CrawlerRunner._crawl``);
``scrapy crawl`` then exits with 1. (An API for it is proposed upstream, scrapy/scrapy#8204.)
So, once a spider closed with a failure reason (``stopping.is_failure``) is completely over,
this extension clears ``crawler.spider``: after the engine stopped, or after the spider closed
when the engine never started (a node stopped while opening). Nothing of Scrapy reads it then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import signals

from .crawler_parts import started_part
from .stop_reasons import is_failure

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class ExitCode:
    """Makes ``scrapy crawl`` exit with 1 after a clustersync failure (see the module doc)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.failed = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def spider_closed(self, reason: str) -> None:
        if not is_failure(reason):
            return
        self.failed = True
        engine = started_part(self.crawler, "engine")
        if engine is None or not engine.running:  # no engine_stopped comes
            self._mark_failed()

    def engine_stopped(self) -> None:
        if self.failed:
            self._mark_failed()

    def _mark_failed(self) -> None:
        self.crawler.spider = None
