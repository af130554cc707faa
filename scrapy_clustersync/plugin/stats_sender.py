"""The cluster's Scrapy stats: what each node's stats grew by, summed in Redis per job and per
node, riding on the writes the node makes anyway.

Every ``every_s`` seconds (and once more when the node leaves) the reactor thread compares the
crawler's stats with what it last sent and submits one ``StatsCounts`` op with the growth of
each summed stat. The op travels in the node's ordered write stream, so it goes to Redis in the
next flush with the pushes and acks (no call of its own while the node crawls), and it
is applied once even when a call is retried (flush.lua's call id). It is left out of the spool
(write_stream.py ``undelivered``): a node killed with SIGKILL, or closed while Redis is away, loses
at most the growth since its last send.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store.write_ops import Op, StatsCounts

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: the stats summed over the cluster (a name equal to one, or starting with one ending in "/"):
#: pages, items, errors, responses by status, retries, bytes. Others (times, memory maxima,
#: the scheduler's own counters) mean nothing summed.
SUMMED = (
    "response_received_count", "item_scraped_count", "item_dropped_count",
    "downloader/request_count", "downloader/response_count", "downloader/exception_count",
    "downloader/request_bytes", "downloader/response_bytes",
    "downloader/response_status_count/", "downloader/exception_type_count/",
    "retry/", "spider_exceptions/", "httperror/", "log_count/ERROR", "log_count/CRITICAL",
    "log_count/WARNING", "dupefilter/filtered", "offsite/", "item_dropped_reasons_count/",
)


#: the largest growth one op carries: flush.lua refuses a count of more than 15 digits, and
#: with it the whole op (every other stat of the send)
MAX_GROWTH = 10**15 - 1


def is_summed(name: object, value: object) -> bool:
    """True for a stat the cluster sums: an int (not a bool) of a SUMMED name."""
    if not isinstance(name, str) or not isinstance(value, int) or isinstance(value, bool):
        return False  # (Scrapy's stats take any key: an extension may count by a tuple)
    summed = _SUMMED_NAMES.get(name)
    if summed is None:  # a crawl has a few dozen stat names: each is looked at once
        summed = "\t" not in name and "\n" not in name and any(
            name == s or (s.endswith("/") and name.startswith(s)) for s in SUMMED)
        if len(_SUMMED_NAMES) < SUMMED_NAMES_KEPT:
            _SUMMED_NAMES[name] = summed
    return summed


#: how many stat names is_summed remembers the answer for (a bound: stat names may be made up)
SUMMED_NAMES_KEPT = 10_000
_SUMMED_NAMES: dict[str, bool] = {}


class StatsSender:
    """Submits the growth of the node's summed stats (reactor thread only)."""

    def __init__(self, stats: StatsCollector | None, submit: Callable[[Op], None],
                 every_s: float) -> None:
        self.stats = stats
        self.submit = submit
        self.every_s = every_s
        self._sent: dict[str, int] = {}
        self._next = time.monotonic() + every_s

    def maybe_send(self) -> None:
        """Send if ``every_s`` passed since the last send."""
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every_s
            self.send()

    def send(self) -> None:
        """Submit what grew since the last send (nothing when nothing did)."""
        if self.stats is None:
            return
        current = {name: value for name, value in self.stats.get_stats().items()
                   if is_summed(name, value)}
        grown = {name: value - self._sent.get(name, 0) for name, value in sorted(current.items())
                 if value != self._sent.get(name, 0)}
        lines = [f"{name}\t{delta}" for name, delta in grown.items() if abs(delta) <= MAX_GROWTH]
        if len(lines) < len(grown):
            logger.warning("clustersync: a stat grew by more than flush.lua's C op takes (15 "
                           "digits) and is left out of the cluster's stats: %s",
                           {n: d for n, d in grown.items() if abs(d) > MAX_GROWTH})
        if lines:
            self.submit(StatsCounts("\n".join(lines)))
        self._sent.update(current)
