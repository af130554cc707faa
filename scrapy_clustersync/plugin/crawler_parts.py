"""The parts of a Scrapy crawler that exist only once its crawl starts, read safely before then.

Scrapy builds a crawler's engine, stats and request fingerprinter when its crawl starts; a
scheduler may be built (and even opened) for a crawler that never starts one: a test of the
scheduler alone, a tool. Reading such a part then raises ``RuntimeError`` (Scrapy 2.19 and
later) or gives None (earlier versions); these helpers give None in both cases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler, load_object

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol


def started_part(crawler: Crawler, name: str) -> Any:
    """``crawler.<name>`` (``engine``, ``request_fingerprinter``...), or None before the crawl
    starts."""
    try:
        return getattr(crawler, name, None)
    except RuntimeError:  # Scrapy >= 2.19: "Crawler.<name> is not set yet"
        return None


class CrawlerFingerprinter:
    """The crawler's own request fingerprinter, looked up when a request is fingerprinted.

    Until the crawler has one (it never started a crawl), a stand-in built from
    ``REQUEST_FINGERPRINTER_CLASS``, as Scrapy builds the crawler's, gives the fingerprints; the
    crawler's own is used from the moment it exists. In a real crawl the scheduler fingerprints
    nothing before the crawl starts, so the stand-in is never built.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._own: RequestFingerprinterProtocol | None = None
        self._stand_in: RequestFingerprinterProtocol | None = None

    def fingerprint(self, request: Request) -> bytes:
        return (self._own or self._find()).fingerprint(request)

    def _find(self) -> RequestFingerprinterProtocol:
        self._own = started_part(self.crawler, "request_fingerprinter")
        if self._own is not None:
            return self._own
        if self._stand_in is None:
            fingerprinter_class = load_object(self.crawler.settings["REQUEST_FINGERPRINTER_CLASS"])
            self._stand_in = build_from_crawler(fingerprinter_class, self.crawler)
        return self._stand_in


def engine_drives(crawler: Crawler, scheduler: object) -> bool:
    """True if a crawl's engine calls ``scheduler`` (and can be woken when work comes); False
    for a script or a test that calls the scheduler directly. The slot is private, hence the
    care."""
    slot = getattr(started_part(crawler, "engine"), "_slot", None)
    return getattr(slot, "scheduler", None) is scheduler


def wake_engine(crawler: Crawler) -> None:
    """Make the engine ask its scheduler for a request now. Scrapy polls ``next_request()``
    only when a request finishes or every 5 s: work that arrives while a node waits must start
    at once. The slot is private, hence the care."""
    slot: Any = getattr(started_part(crawler, "engine"), "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
