"""What a node tells the cluster in every heartbeat, and the setting that says when it is dead."""

from __future__ import annotations

from pathlib import Path

import pytest
import scrapy
from scrapy.settings import Settings

from scrapy_clustersync import __version__
from scrapy_clustersync.config import ClusterConfig, ConfigError
from scrapy_clustersync.node.node_record import NodeInfo
from scrapy_clustersync.node.project_digest import project_digest
from scrapy_clustersync.store.script_results import DeadNode

from .node_fakes import ListingSpider, make_crawler, make_scheduler

#: the fields the CLI reads from the part of the record the node's Scrapy side builds (the
#: Redis thread adds leased, prefetched, buffered and state)
RECORD_FIELDS = {
    "node", "host", "ip", "pid", "started", "updated", "cpu_percent", "rss_bytes", "load_avg",
    "concurrency", "inflight", "pages", "items", "errors", "pages_per_min", "settings_version",
    "versions", "digest", "spider", "runs_start", "unserializable",
}


def config(**settings: object) -> ClusterConfig:
    base = {"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0"}
    return ClusterConfig.from_settings(Settings({**base, **settings}), "spider")


def test_a_node_record_carries_every_field_the_cluster_reads(tmp_path: Path) -> None:
    # given a node of 8 concurrent requests that saw spider exceptions and download errors
    scheduler, thread = make_scheduler(tmp_path, CONCURRENT_REQUESTS=8)
    stats = scheduler.crawler.stats
    assert stats is not None
    stats.set_value("spider_exceptions/count", 3)  # as Scrapy counts them: in total and by class
    stats.set_value("spider_exceptions/ValueError", 2)
    stats.set_value("spider_exceptions/KeyError", 1)
    stats.set_value("downloader/exception_count", 4)
    stats.set_value("response_received_count", 10)
    # when its record is built for a heartbeat
    record = thread.node_info()
    # then it has every field, with what the node is
    assert set(record) >= RECORD_FIELDS
    assert record["node"] == scheduler.config.node_id
    assert record["ip"] == "127.0.0.1"  # Redis is on this machine
    assert (record["concurrency"], record["errors"], record["pages"]) == (8, 7, 10)
    assert record["versions"] == {"clustersync": __version__, "scrapy": scrapy.__version__,
                                  "python": record["versions"]["python"]}
    assert len(record["load_avg"]) == 3 and record["settings_version"] is None
    assert len(record["digest"]) == 12 and int(record["digest"], 16) >= 0


def digest_of(**settings: object) -> str:
    crawler = make_crawler(**settings)
    return project_digest(crawler.settings, ListingSpider)


def test_the_digest_changes_with_a_crawl_setting_and_not_with_per_node_ones() -> None:
    # given the digest of a project's settings
    base = digest_of(DOWNLOAD_DELAY=0.5)
    # when only where a node logs, keeps its JOBDIR or reaches Redis differs, then it is equal
    assert digest_of(DOWNLOAD_DELAY=0.5, LOG_FILE="/tmp/a.log", JOBDIR="/tmp/job",
                     CLUSTERSYNC_REDIS_URL="redis://10.0.0.9:6379/0") == base
    # when a setting that changes the crawl differs, then it differs
    assert digest_of(DOWNLOAD_DELAY=2) != base


def test_the_record_of_a_node_without_a_spider_class_still_has_a_digest() -> None:
    # given a node record built without settings or spider (a bare store user)
    info = NodeInfo(None, None, False, inflight=lambda: 0)
    # then the record is complete all the same
    assert set(info.snapshot()) >= RECORD_FIELDS


def test_node_dead_after_defaults_to_three_heartbeat_intervals() -> None:
    assert config(CLUSTERSYNC_HEARTBEAT_INTERVAL=0.5).node_dead_after_s == 1.5
    assert config().node_dead_after_s == 3.0
    assert config(CLUSTERSYNC_NODE_DEAD_AFTER=10).node_dead_after_s == 10.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", r"CLUSTERSYNC_NODE_DEAD_AFTER = 'soon' is not a number"),
        (-1, r"CLUSTERSYNC_NODE_DEAD_AFTER = -1 is too small"),
        (1.5, r"CLUSTERSYNC_NODE_DEAD_AFTER \(1.5s\) must be at least two "
              r"CLUSTERSYNC_HEARTBEAT_INTERVAL \(1s\)"),
    ],
)
def test_a_node_dead_after_that_cannot_work_is_refused_by_name(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(CLUSTERSYNC_NODE_DEAD_AFTER=value)


def test_a_death_record_another_program_wrote_is_shown_not_fatal() -> None:
    dead = DeadNode.parse("n1", b"not json")
    assert (dead.node, dead.leases_returned, dead.record) == ("n1", 0, {"unreadable": "not json"})
