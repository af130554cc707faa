"""ResultPipeline: the item pipeline that writes every item to the job's results stream.

The add-on puts it at ``ORDER`` (after the project's own pipelines), so it sees each item as
they made it. It only encodes the item (result_collector.py ``ResultCollector.record``); the
item goes to Redis with the ack of the request that produced it, and only if no pipeline after
it drops it. As the last pipeline (no pipeline of the project after it), it is taken out of the
chain once the node has joined, and the collector encodes the item the chain returns, which is
the same item, at less cost per item. It returns every item unchanged, also one it refuses
(too large, or holding a value that cannot be encoded): to Scrapy, the item is scraped either
way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured

from .signals import node_opened

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from .cluster_scheduler import ClusterScheduler
    from .result_collector import ResultCollector

#: after the project's pipelines (Scrapy's examples number theirs 100-900)
ORDER = 1000


class ResultPipeline:
    """Hands each item to the node's ResultCollector (a no-op until the node joined its job,
    and on a node without results)."""

    def __init__(self) -> None:
        self.collector: ResultCollector | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("CLUSTERSYNC_RESULTS", True):
            raise NotConfigured("CLUSTERSYNC_RESULTS is False")
        pipeline = cls()
        crawler.signals.connect(pipeline.node_opened, signal=node_opened)
        return pipeline

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.collector = scheduler.results

    def process_item(self, item: Any) -> Any:
        collector = self.collector
        if collector is not None:
            collector.record(item)
        return item
