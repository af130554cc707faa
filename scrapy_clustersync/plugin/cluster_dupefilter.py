"""Dedup, cluster-wide: the authoritative check runs in Redis, atomically with the push.

Every request fingerprint comes from Scrapy's own ``crawler.request_fingerprinter``
(``crawlerparts.CrawlerFingerprinter``). The flush
script adds the fingerprint to the job's shared record and queues the request only if it was
new, in one step, so two nodes can never both queue the same URL. This module keeps the node's
side of it: the fingerprints this node already sent (a bounded cache that saves Redis the work
for links seen again and again) and the log line for filtered requests, as Scrapy's own.

``DUPEFILTER_CLASS`` is honoured as Scrapy's scheduler honours it (``project_dupefilter``).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from typing import TYPE_CHECKING

from scrapy.dupefilters import BaseDupeFilter, RFPDupeFilter
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import referer_str

from ..config import DEFAULTS
from .crawler_parts import BoundedDict, CrawlerFingerprinter

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol
    from typing_extensions import Self

#: Scrapy's own dupefilter logger: a project's log settings for it apply to the cluster's lines
logger = logging.getLogger("scrapy.dupefilters")

FINGERPRINT_BYTES = 20


def cluster_fingerprint(fingerprint: object) -> bytes:
    """``fingerprint`` as the 20 bytes the job's dedup record holds.

    Scrapy's fingerprinter gives 20 bytes (SHA-1). A custom one may give other lengths or a
    str; those are hashed to 20 bytes, so any fingerprinter works and every node (and the CLI)
    records the same URL the same way.
    """
    if isinstance(fingerprint, bytes) and len(fingerprint) == FINGERPRINT_BYTES:
        return fingerprint
    if isinstance(fingerprint, str):
        fingerprint = fingerprint.encode()
    if not isinstance(fingerprint, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"the request fingerprinter returned {type(fingerprint).__name__}; "
            "REQUEST_FINGERPRINTER_CLASS must return bytes"
        )
    return hashlib.sha1(bytes(fingerprint)).digest()


class RecentFingerprints:
    """Fingerprints this node has sent to Redis, the oldest forgotten first past ``capacity``.

    A hit is a certain duplicate (the fingerprint is in the shared record already or in this
    node's unsent writes); a miss proves nothing and the request goes to Redis to be checked.
    """

    def __init__(self, capacity: int) -> None:
        self._fingerprints = BoundedDict(capacity)

    def __contains__(self, fingerprint: bytes) -> bool:
        return fingerprint in self._fingerprints

    def clear(self) -> None:
        self._fingerprints.clear()

    def add(self, fingerprint: bytes) -> None:
        self._fingerprints.put(fingerprint, None)


class ClusterDupeFilter(BaseDupeFilter):
    """The node's dedup front: fingerprints, the local cache, stats and the filtered-request log.

    The add-on makes it ``DUPEFILTER_CLASS``; the scheduler drives it through ``seen_here`` and
    ``sent`` (a request is recorded only once its push is buffered), not ``request_seen``.
    """

    def __init__(
        self,
        fingerprinter: RequestFingerprinterProtocol,
        counts: Counter[str],
        cache_size: int,
        debug: bool = False,
    ) -> None:
        self.fingerprinter = fingerprinter
        #: stats to add to the crawler's (kept here: this is the per-request hot path)
        self.counts = counts
        self.recent = RecentFingerprints(cache_size)
        self.debug = debug
        self._logged_once = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        cache_size = settings.getint("CLUSTERSYNC_LOCAL_SEEN_CACHE",
                                     int(DEFAULTS["CLUSTERSYNC_LOCAL_SEEN_CACHE"]))
        return cls(CrawlerFingerprinter(crawler), Counter(), cache_size,
                   debug=settings.getbool("DUPEFILTER_DEBUG"))

    def request_seen(self, request: Request) -> bool:
        """True if this node already sent ``request``; records nothing (Redis has the last word)."""
        return self.fingerprint(request) in self.recent

    def log(self, request: Request, spider: Spider | None) -> None:
        """Log ``request`` as a filtered duplicate, as Scrapy's RFPDupeFilter does, and count it."""
        self.counts["dupefilter/filtered"] += 1
        self._log(request, spider)

    def fingerprint(self, request: Request) -> bytes:
        return cluster_fingerprint(self.fingerprinter.fingerprint(request))

    def seen_here(self, fingerprint: bytes, request: Request) -> bool:
        """True if this node already sent ``fingerprint``: ``request`` is a duplicate."""
        if fingerprint not in self.recent:
            return False
        self.counts["clustersync/dedup/filtered_local"] += 1
        self.log(request, None)
        return True

    def sent(self, fingerprint: bytes) -> None:
        self.recent.add(fingerprint)

    def forget_sent(self) -> None:
        """Forget every fingerprint sent: Redis came back older and may not hold them."""
        self.recent.clear()

    def filtered_in_redis(self, count: int) -> None:
        self.counts["clustersync/dedup/filtered"] += count
        self.counts["dupefilter/filtered"] += count

    def _log(self, request: Request, spider: Spider | None) -> None:
        extra = {"spider": spider} if spider is not None else None
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s (referer: %(referer)s)",
                         {"request": request, "referer": referer_str(request)}, extra=extra)
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request}, extra=extra,
            )
            self._logged_once = True


def project_dupefilter(crawler: Crawler, cluster: ClusterDupeFilter) -> BaseDupeFilter:
    """The ``DUPEFILTER_CLASS`` of the project, built as Scrapy's scheduler builds it.

    The cluster's own class, and Scrapy's default ``RFPDupeFilter`` (which dedups by the same
    fingerprints the cluster's filter records job-wide), give ``cluster`` itself: nothing more
    to consult, and no per-node set of every fingerprint. Any other class is built with
    ``build_from_crawler`` and is consulted on the node before the cluster's filter;
    ``BaseDupeFilter`` itself turns dedup off (``dedups_nothing``).
    """
    dupefilter_class = load_object(crawler.settings["DUPEFILTER_CLASS"])
    if dupefilter_class in (ClusterDupeFilter, RFPDupeFilter):
        return cluster
    built: BaseDupeFilter = build_from_crawler(dupefilter_class, crawler)
    return built


def dedups_nothing(dupefilter: BaseDupeFilter) -> bool:
    """True for Scrapy's ``BaseDupeFilter`` itself: the project wants no dedup at all."""
    return type(dupefilter) is BaseDupeFilter


class NodeDedup:
    """Whether a request is a duplicate on this node: the project's ``df`` is asked first, as
    Scrapy's scheduler asks it, then the cluster's filter (this node's sent fingerprints here,
    the job's record in Redis, atomically with the push)."""

    def __init__(self, crawler: Crawler, cluster: ClusterDupeFilter, df: BaseDupeFilter) -> None:
        self.crawler = crawler
        self.cluster = cluster
        self.df = df

    def fingerprint_if_new(self, request: Request) -> bytes | None:
        """None if ``request`` is a duplicate here; else the fingerprint its push carries (b""
        when nothing dedups it: ``dont_filter``, or ``DUPEFILTER_CLASS = BaseDupeFilter``)."""
        if request.dont_filter or dedups_nothing(self.df):
            return b""
        if self.df is not self.cluster and self.df.request_seen(request):
            self.df.log(request, self.crawler.spider)  # type: ignore[arg-type]
            return None
        fingerprint = self.cluster.fingerprint(request)
        return None if self.cluster.seen_here(fingerprint, request) else fingerprint

    def forget_sent(self) -> None:
        """Forget every fingerprint sent: Redis came back older and may have lost the pushes.

        A project's dupefilter is closed and built anew: one that remembered them would drop
        the children of a parent crawled again, whose first pushes Redis lost.
        """
        self.cluster.forget_sent()
        if self.df is not self.cluster and not dedups_nothing(self.df):
            self.df.close("clustersync_rolled_back")
            self.df = build_from_crawler(type(self.df), self.crawler)
            self.df.open()
