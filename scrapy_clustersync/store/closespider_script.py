"""The cluster's CLOSESPIDER_* counts (closespider.lua): a node adds what it counted and learns
the job's totals, and the script stops the job when a total reaches its limit.

``CloseLimits`` holds Scrapy's limits as the node applies them (0: off, Scrapy's meaning);
``SpiderCounts`` what the node counted since its last call. ``CloseSpiderStore.count`` (or
``count_in`` a round trip) sends both; its answer, ``ClusterCounts``, says the totals and the
close reason the job was stopped with ("" while no limit stopped it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from .keys import JobKeys
from .records import as_text
from .round_trip import Answer, RoundTrip
from .script_base import JobScript


@dataclass(frozen=True)
class CloseLimits:
    """Scrapy's CLOSESPIDER_* limits for the cluster; 0 is off."""

    pagecount: int = 0
    itemcount: int = 0
    errorcount: int = 0
    timeout_s: float = 0.0
    timeout_no_item_s: float = 0.0
    pagecount_no_item: int = 0

    @property
    def any(self) -> bool:
        """Some limit is on."""
        return any((self.pagecount, self.itemcount, self.errorcount, self.timeout_s,
                    self.timeout_no_item_s, self.pagecount_no_item))

    @property
    def timed(self) -> bool:
        """A limit is a time: it is reached without anything counted."""
        return bool(self.timeout_s or self.timeout_no_item_s)


@dataclass(frozen=True)
class SpiderCounts:
    """What a node counted since its last call (responses, items, spider errors)."""

    pages: int = 0
    items: int = 0
    errors: int = 0

    def __add__(self, other: SpiderCounts) -> SpiderCounts:
        return SpiderCounts(self.pages + other.pages, self.items + other.items,
                            self.errors + other.errors)

    def __bool__(self) -> bool:
        return bool(self.pages or self.items or self.errors)


@dataclass(frozen=True)
class ClusterCounts:
    """The job's totals after a call, and the reason a limit stopped the job ("" if none)."""

    pages: int = 0
    items: int = 0
    errors: int = 0
    stop_reason: str = ""
    #: page tickets this call granted
    granted: int = 0


class CloseSpiderScript(JobScript):
    """closespider.lua (see its header)."""

    FILE = "closespider"
    KEYS = ("meta", "closespider")
    ARGV = ("channel", "node", "call_id", "pages", "items", "errors", "pagecount", "itemcount",
            "errorcount", "timeout_ms", "no_item_ms", "pages_no_item", "want", "give_back")

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        super().__init__(client, keys)
        self.node_id = node_id

    def call(self, call_id: str, counts: SpiderCounts, limits: CloseLimits, want: int = 0,
             give_back: int = 0) -> tuple[list[str], list[Any]]:
        k = self.keys
        return [k.meta, k.closespider], [
            k.control_channel, self.node_id, call_id, counts.pages, counts.items, counts.errors,
            limits.pagecount, limits.itemcount, limits.errorcount,
            round(limits.timeout_s * 1000), round(limits.timeout_no_item_s * 1000),
            limits.pagecount_no_item, want, give_back]

    @staticmethod
    def parse(reply: Any) -> ClusterCounts:
        pages, items, errors, reason, granted = reply
        return ClusterCounts(int(pages), int(items), int(errors), as_text(reason), int(granted))

    def run(self, call_id: str, counts: SpiderCounts, limits: CloseLimits, want: int = 0,
            give_back: int = 0) -> ClusterCounts:
        return self.parse(self._call(*self.call(call_id, counts, limits, want, give_back)))


class CloseSpiderStore:
    """One node's side of the cluster's counts (see the module doc)."""

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        self.client = client
        self._script = CloseSpiderScript(client, keys, node_id)

    def count(self, call_id: str, counts: SpiderCounts, limits: CloseLimits, want: int = 0,
              give_back: int = 0) -> ClusterCounts:
        """Add ``counts`` under ``call_id`` (sent again, it adds nothing more and answers the
        same), give back ``give_back`` page tickets, ask for ``want`` more; check ``limits``
        (the job stops when one is reached); one atomic call."""
        return self._script.run(call_id, counts, limits, want, give_back)

    def count_in(self, trip: RoundTrip, call_id: str, counts: SpiderCounts, limits: CloseLimits,
                 want: int = 0, give_back: int = 0) -> Answer[ClusterCounts]:
        """``count`` in ``trip`` (round_trip.py)."""
        script = self._script
        keys, args = script.call(call_id, counts, limits, want, give_back)
        return trip.add(lambda pipe: script.queue(pipe, keys, args),
                        Answer(self.client, script.parse,
                               lambda: self.count(call_id, counts, limits, want, give_back)),
                        ran=script.sent)
