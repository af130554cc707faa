"""PublishedCounts: the node's hot-path counts, added to the crawler's Scrapy stats now and then.

The scheduler counts on the hot path in a ``Counter`` (a dict increment, no stats call per
request) and publishes it when the Redis thread hands something over and at close, with what
Redis did with the node's writes (pushed, filtered, released, outranked) since the last time.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from .cluster_dupefilter import ClusterDupeFilter


class PublishedCounts:
    """Adds ``counts`` to ``stats`` (and sets them back to 0) on each ``publish``."""

    def __init__(self, counts: Counter[str], stats: StatsCollector,
                 dupefilter: ClusterDupeFilter) -> None:
        self.counts = counts
        self.stats = stats
        self.dupefilter = dupefilter
        self._totals: dict[str, int] = {}  # the Redis thread's totals as last published

    def publish(self, totals: dict[str, int] | None) -> None:
        """Publish the counts, and the growth of ``totals`` (the Redis thread's, None before
        the node joined) since the last call."""
        if totals is not None:
            delta = {name: total - self._totals.get(name, 0) for name, total in totals.items()}
            self._totals.update(totals)
            self.counts["clustersync/pushed"] += delta["pushed"]
            self.counts["clustersync/released"] += delta["released"]
            self.counts["clustersync/outranked"] += delta.get("outranked", 0)
            self.dupefilter.filtered_in_redis(delta["filtered"])
        counts = self.counts
        for key, value in counts.items():
            if value:
                self.stats.inc_value(key, value)
                counts[key] = 0  # kept at 0: counting it again finds the key (no __missing__)
