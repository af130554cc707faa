"""The parts of a Scrapy crawler that exist only once its crawl starts, read safely before then.

Scrapy builds a crawler's engine, stats and request fingerprinter when its crawl starts; a
scheduler may be built (and even opened) for a crawler that never starts one: a test of the
scheduler alone, a tool. Reading such a part then raises ``RuntimeError`` (Scrapy 2.19 and
later) or gives None (earlier versions); these helpers give None in both cases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.request import fingerprint as scrapy_fingerprint

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


#: fingerprints of the URLs a node saw last, with Scrapy's default fingerprinter (see
#: CrawlerFingerprinter): about 250 bytes each
URL_FINGERPRINTS_KEPT = 20_000
#: a body longer than this is not a memo key (hashing it would cost what the memo saves)
MEMO_BODY_MAX = 2048


class BoundedDict(dict[Any, Any]):
    """A dict of at most ``capacity`` keys: past it, the oldest tenth is forgotten."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def put(self, key: Any, value: Any) -> None:
        if self.capacity <= 0:
            return
        self[key] = value
        if len(self) > self.capacity:
            for old in list(self)[: max(1, self.capacity // 10)]:
                del self[old]


class CrawlerFingerprinter:
    """The crawler's own request fingerprinter, looked up when a request is fingerprinted.

    Until the crawler has one (it never started a crawl), a stand-in built from
    ``REQUEST_FINGERPRINTER_CLASS``, as Scrapy builds the crawler's, gives the fingerprints; the
    crawler's own is used from the moment it exists. In a real crawl the scheduler fingerprints
    nothing before the crawl starts, so the stand-in is never built.

    With Scrapy's default fingerprinter, whose fingerprint depends only on the method, the URL,
    the body and ``meta["verbatim_url"]``, the fingerprints of the last URLs seen are kept
    (``URL_FINGERPRINTS_KEPT``): the pages of a site link to the same URLs again and again, and
    canonicalizing each URL is most of what checking a duplicate link costs. Any other
    fingerprinter is asked every time.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._own: RequestFingerprinterProtocol | None = None
        self._stand_in: RequestFingerprinterProtocol | None = None
        self._memo: BoundedDict | None = None

    def fingerprint(self, request: Request) -> bytes:
        own = self._own or self._find()
        memo = self._memo
        if memo is None or len(request.body) > MEMO_BODY_MAX:
            return own.fingerprint(request)
        key = (request.url, request.method, request.body, bool(request.meta.get("verbatim_url")))
        fingerprint: bytes | None = memo.get(key)
        if fingerprint is None:
            fingerprint = own.fingerprint(request)
            memo.put(key, fingerprint)
        return fingerprint

    def _find(self) -> RequestFingerprinterProtocol:
        self._own = started_part(self.crawler, "request_fingerprinter")
        if self._own is not None:
            if (type(self._own) is RequestFingerprinter
                    and getattr(self._own, "_fingerprint", None) is scrapy_fingerprint):
                self._memo = BoundedDict(URL_FINGERPRINTS_KEPT)
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
