"""Dedup, cluster-wide: the authoritative check runs in Redis, atomically with the push.

Every request fingerprint comes from Scrapy's own ``crawler.request_fingerprinter``. The flush
script adds the fingerprint to the job's shared record and queues the request only if it was
new, in one step, so two nodes can never both queue the same URL. This module keeps the node's
side of it: the fingerprints this node already sent (a bounded cache that saves Redis the work
for links seen again and again) and the log line for filtered requests.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections import Counter

    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)

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
        self.capacity = capacity
        self._fingerprints: dict[bytes, None] = {}

    def __contains__(self, fingerprint: bytes) -> bool:
        return fingerprint in self._fingerprints

    def clear(self) -> None:
        self._fingerprints.clear()

    def add(self, fingerprint: bytes) -> None:
        if self.capacity <= 0:
            return
        self._fingerprints[fingerprint] = None
        if len(self._fingerprints) > self.capacity:
            for old in list(self._fingerprints)[: max(1, self.capacity // 10)]:
                del self._fingerprints[old]


class ClusterDupeFilter:
    """The node's dedup front: fingerprints, the local cache, stats and the filtered-request log."""

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

    def fingerprint(self, request: Request) -> bytes:
        return cluster_fingerprint(self.fingerprinter.fingerprint(request))

    def seen_here(self, fingerprint: bytes, request: Request) -> bool:
        """True if this node already sent ``fingerprint``: ``request`` is a duplicate."""
        if fingerprint not in self.recent:
            return False
        self.counts["clustersync/dedup/filtered_local"] += 1
        self.counts["dupefilter/filtered"] += 1
        self._log(request)
        return True

    def sent(self, fingerprint: bytes) -> None:
        self.recent.add(fingerprint)

    def forget_sent(self) -> None:
        """Forget every fingerprint sent: Redis came back older and may not hold them."""
        self.recent.clear()

    def filtered_in_redis(self, count: int) -> None:
        self.counts["clustersync/dedup/filtered"] += count
        self.counts["dupefilter/filtered"] += count

    def _log(self, request: Request) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request})
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
            )
            self._logged_once = True
