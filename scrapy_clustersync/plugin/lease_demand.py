"""What a node's downloader holds and can take: what its lease is sized from (lease_sizing.py).

Read from Scrapy's downloader on the reactor, at most every ``lease_sizing.REFRESH_S``:

- not started: the leased requests handed to the engine that are neither being scraped nor on
  the wire (``Slot.transferring``): they wait in a download slot's queue for the site's
  concurrency or delay, in a download gate before it, or in a downloader middleware;
- room: for each download slot, what it can put on the wire now (its free concurrency; one
  request, and only with nothing queued, for a slot with a delay), plus one site not seen yet
  (the project's per-domain concurrency, or one request with a ``DOWNLOAD_DELAY``), within the
  downloader's free ``CONCURRENT_REQUESTS``;
- capacity: what the slots run at once (a slot with a delay counts one), the same site not seen
  yet included, within ``CONCURRENT_REQUESTS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.settings import BaseSettings

from ..config import new_site_room
from ..node.lease_sizing import Downstream


class DownloaderDemand:
    """Measures ``Downstream`` for the lease's size; ``engine`` gives the crawl's engine (None
    before it starts), ``under_way`` the leased requests handed out and not scraped yet."""

    def __init__(self, engine: Callable[[], Any], under_way: Callable[[], int],
                 settings: BaseSettings) -> None:
        self._engine = engine
        self._under_way = under_way
        self.new_site_room = new_site_room(settings)

    def __call__(self) -> Downstream:
        downloader = getattr(self._engine(), "downloader", None)
        slots = getattr(downloader, "slots", None)
        if not isinstance(slots, dict):  # no crawl yet, or a stand-in downloader (tests)
            return Downstream(0, self.new_site_room)
        transferring = room = capacity = 0
        for slot in list(slots.values()):
            transferring += len(slot.transferring)
            free = slot.concurrency - len(slot.active)
            if slot.delay > 0:
                free = min(free, 0 if slot.queue else 1)
            room += max(0, free)
            capacity += 1 if slot.delay > 0 else slot.concurrency
        room += self.new_site_room
        capacity += self.new_site_room
        total = getattr(downloader, "total_concurrency", 0)
        if total > 0:  # 0: no overall limit
            room = min(room, total - len(getattr(downloader, "active", ())))
            capacity = min(capacity, total)
        return Downstream(max(0, self._under_way() - transferring), max(0, room), capacity)
