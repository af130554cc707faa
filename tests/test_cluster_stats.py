"""The cluster's Scrapy stats: every node's pages, items, responses by status and bytes are
summed in Redis, per job and per node, and match what the site served to each node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.plugin.stats_sender import StatsSender, is_summed
from scrapy_clustersync.store import JobStore, Op, make_client
from scrapy_clustersync.store.errors import BadBatch
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import StatsCounts
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import clustersync, start_nodes, wait_all


def test_two_nodes_stats_are_summed_per_job_and_per_node(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two nodes crawling a 300-page site
    web = site(300)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        settings={"CLUSTERSYNC_JOB": "shop"})
    wait_all(nodes, timeout_s=120)
    # when the job's status is read
    done = clustersync(redis_server.url, "status", "shop", "--json")
    status = json.loads(done.stdout)
    # then the job's sums match what the site served, and each node's what it was served
    served = {node.name: sum(web.hits_by_agent().get(node.name, {}).values()) for node in nodes}
    assert sum(served.values()) == 300
    assert status["stats"]["response_received_count"] == 300
    assert status["stats"]["downloader/response_status_count/200"] == 300
    assert status["stats"]["downloader/response_bytes"] > 300 * 100
    by_node = {record["id"]: record["stats"] for record in status["nodes"]}
    assert sorted(s["response_received_count"] for s in by_node.values()) == sorted(
        served.values())
    assert sum(s["downloader/request_count"] for s in by_node.values()) == \
        status["stats"]["downloader/request_count"]
    text = clustersync(redis_server.url, "status", "shop").stdout
    assert "responses    200: 300" in text


def test_the_sender_sends_only_what_grew_of_summed_stats() -> None:
    # given a node's stats, of kinds summed and not
    stats = MemoryStatsCollector.__new__(MemoryStatsCollector)
    stats._stats = {"response_received_count": 3, "elapsed_time_seconds": 1.5,
                    "memusage/max": 10, "downloader/response_status_count/404": 1,
                    "retry/count": 2, "log_count/INFO": 7}
    sent: list[Op] = []
    sender = StatsSender(stats, sent.append, every_s=60)
    # when it sends twice, and again after more pages
    sender.send()
    sender.send()
    stats._stats["response_received_count"] = 5
    sender.send()
    # then the first send has every summed stat, the second nothing, the third the growth
    assert sent == [
        StatsCounts("downloader/response_status_count/404\t1\nresponse_received_count\t3\n"
                    "retry/count\t2"),
        StatsCounts("response_received_count\t2"),
    ]
    assert not is_summed("memusage/max", 10) and not is_summed("x", True)


@pytest.mark.parametrize("counts", ["no tab", "pages\t1.5", "pages\t" + "9" * 16,
                                    "ok\t1\nbad line"])
def test_malformed_stats_counts_are_refused_before_any_change(
    redis_server: RedisServer, counts: str,
) -> None:
    store = JobStore(make_client(redis_server.url), "shop", "n1")
    epoch = store.join(ttl_ms=60_000)[0]
    with pytest.raises(BadBatch):
        store.flush(epoch, [StatsCounts("ok\t1"), StatsCounts(counts)], new_call_id())
    assert store.status().scrapy_stats == {}
    store.flush(epoch, [StatsCounts("ok\t1\nother\t-2")], new_call_id())
    assert store.status().scrapy_stats == {"ok": 1, "other": -2}


# ---- stats that do not fit ----------------------------------------------------------------------

class FakeStats:
    def __init__(self, stats: dict[Any, Any]) -> None:
        self.stats = stats

    def get_stats(self) -> dict[Any, Any]:
        return self.stats


def test_a_stat_with_a_non_text_name_does_not_break_the_stats_sender() -> None:
    # given a node whose Scrapy stats hold a key that is not a str (Scrapy's stats collector
    # takes any key; an extension counts per (domain, status) tuple)
    sent: list[Any] = []
    stats: Any = FakeStats({"response_received_count": 3, ("example.com", 200): 1})
    sender = StatsSender(stats, sent.append, every_s=1.0)
    # when it sends the growth (ClusterScheduler.check does, from the lifecycle loop)
    sender.send()
    # then the summed stats go out, and the odd key is left alone
    assert [op.counts for op in sent] == ["response_received_count\t3"]


def test_one_stat_too_big_for_the_op_does_not_lose_the_other_stats_of_its_send(
    redis_server: RedisServer,
) -> None:
    # given a node whose stats grew: 5 responses, and a counter a middleware set very high
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000, claim=False)[0]
    node = NodeThread(store, config, epoch)
    stats: Any = FakeStats({"response_received_count": 5, "downloader/response_bytes": 10**16})
    sender = StatsSender(stats, node.link.submit, every_s=1.0)
    # when it sends them
    sender.send()
    node.start()
    node.close(unacked=[], timeout_s=20)
    client = redis_server.client()
    summed = client.hgetall("clustersync:{job}:scrapy_stats")
    print("cluster stats:", summed, "dead letters:", client.llen("clustersync:{job}:dead"))
    # then the responses are counted in the cluster's stats
    assert int(summed.get(b"response_received_count", 0)) == 5
