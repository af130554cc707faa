"""What a node's downloader holds and can take: what its lease is sized from (lease_sizing.py).

Read from Scrapy's downloader on the reactor, at most every ``lease_sizing.REFRESH_S``:

- not started: the leased requests handed to the engine that are neither being scraped nor on
  the wire (``Slot.transferring``): they wait in a download slot's queue for the site's
  concurrency or delay, in a download gate before it, or in a downloader middleware;
- room: for each download slot, what it can put on the wire now (its free concurrency; one
  request, and only with nothing queued, for a slot with a delay), plus one site not seen yet
  (the project's per-domain concurrency, or one request with a ``DOWNLOAD_DELAY``), within the
  downloader's free ``CONCURRENT_REQUESTS``;
- capacity: what the slots run at once, the same site not seen yet included, within
  ``CONCURRENT_REQUESTS``; and for each slot with a delay, what it keeps ready (``paced_need``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from time import monotonic
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
        transferring = room = capacity = paced = 0
        now = monotonic()  # Scrapy's clock for Slot.lastseen
        for slot in list(slots.values()):
            transferring += len(slot.transferring)
            free = slot.concurrency - len(slot.active)
            if slot.delay > 0:
                free = min(free, 0 if slot.queue else 1)
                if slot.active or now - slot.lastseen <= PACED_RECENT_S:
                    paced += paced_need(slot.delay)
            else:
                capacity += slot.concurrency
            room += max(0, free)
        room += self.new_site_room
        capacity += self.new_site_room
        total = getattr(downloader, "total_concurrency", 0)
        if total > 0:  # 0: no overall limit
            room = min(room, total - len(getattr(downloader, "active", ())))
            capacity = min(capacity, total)
        return Downstream(max(0, self._under_way() - transferring), max(0, room),
                          capacity + paced)


#: a site with a delay keeps ready the requests of its turns over this long (``paced_need``)
PACED_HORIZON_S = 1.5
#: ... if it started a request this recently, or has one under way: Scrapy keeps a site's slot
#: a minute or more after its last request, and a site done with must not size the lease
PACED_RECENT_S = 10.0


def paced_need(delay_s: float) -> int:
    """The requests a site with a delay keeps ready on the node: one for its next turn and one
    for each turn the site has in ``PACED_HORIZON_S`` (for every node together: at most that
    long of the site's work is kept from the others). A lease is blind to sites: with fewer
    in hand over many paced sites, some site's turn comes while this node holds none of its
    requests (and the other nodes may hold none either), and that turn is lost. Not within
    CONCURRENT_REQUESTS: those the downloader cannot take yet wait, leased, on the node."""
    return 1 + math.ceil(PACED_HORIZON_S / delay_s)
