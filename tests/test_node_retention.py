"""The records of nodes closed or dead for longer than CLUSTERSYNC_NODE_RETENTION are pruned by
the live nodes' heartbeats, with a summary kept, so that a long autoscaled job's status stays
small and its totals whole. The heartbeat script is called directly on a real redis-server,
with a retention of a fraction of a second (the setting's own minimum is a minute)."""

from __future__ import annotations

import time
from typing import Any

from scrapy_clustersync.store import JobStore
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import StatsCounts
from testkit.redis_server import RedisServer

from support import clustersync, joined

RETENTION_MS = 400


def beat(store: JobStore, epoch: str, ttl_ms: int = 10_000, **kw: Any) -> Any:
    options: dict[str, Any] = {"lease_ms": 60_000, "info": {"state": "crawling"},
                               "idle": False, "idle_after_ms": 1000, "lease_ids": []}
    return store.heartbeat(epoch, ttl_ms=ttl_ms, **(options | kw))


def test_nodes_closed_or_dead_longer_than_the_retention_are_pruned_and_summed_up(
    redis_server: RedisServer,
) -> None:
    # given node a that crawled 5 pages and left, node b that crawled 7 and went silent (then
    # declared dead by c), and node c that stays
    a, epoch = joined(redis_server, "a", job="site")
    b, _ = joined(redis_server, "b", job="site")
    c, _ = joined(redis_server, "c", job="site")
    a.flush(epoch, [StatsCounts("response_received_count\t5")], new_call_id())
    b.flush(epoch, [StatsCounts("response_received_count\t7")], new_call_id())
    beat(a, epoch, ttl_ms=0, info={"state": "closed"})
    beat(b, epoch, ttl_ms=200)
    time.sleep(0.3)
    assert [d.node for d in beat(c, epoch).declared_dead] == ["b"]
    # when c's heartbeats go on, with the retention, once it has passed
    assert {n["id"] for n in c.status().nodes} == {"a", "b", "c"}
    time.sleep(RETENTION_MS / 1000 + 0.1)
    beat(c, epoch, retention_ms=RETENTION_MS)
    # then only c's records are left; the job keeps how many went, and their stats, and its
    # totals are whole
    status = c.status()
    assert [n["id"] for n in status.nodes] == ["c"] and status.dead_nodes == []
    assert status.pruned == {"nodes": 2, "closed": 1, "dead": 1,
                             "stat\tresponse_received_count": 12}
    node_stats = c.client.hkeys(c.keys.node_stats)
    assert node_stats == []
    assert status.scrapy_stats["response_received_count"] == 12
    # and status says they were pruned
    text = clustersync(redis_server.url, "status", "site").stdout
    assert "2 older node(s) pruned (CLUSTERSYNC_NODE_RETENTION)" in text, text


def test_a_live_node_and_a_node_dead_for_less_than_the_retention_are_kept(
    redis_server: RedisServer,
) -> None:
    # given node a that left, and node c that beats with a retention of a minute
    a, epoch = joined(redis_server, "a", job="site")
    c, _ = joined(redis_server, "c", job="site")
    beat(a, epoch, ttl_ms=0, info={"state": "closed"})
    # when c beats
    beat(c, epoch, retention_ms=60_000)
    # then a's record is kept, and nothing is pruned
    status = c.status()
    assert {n["id"] for n in status.nodes} == {"a", "c"} and status.pruned == {}


def test_a_node_dead_before_its_first_heartbeat_is_pruned_too(redis_server: RedisServer) -> None:
    # given node b that joined and died before its first heartbeat (a kill during its
    # start-up), declared dead by node c
    b, epoch = joined(redis_server, "b", job="site", ttl_ms=200)
    c, _ = joined(redis_server, "c", job="site")
    time.sleep(0.3)
    assert [d.node for d in beat(c, epoch).declared_dead] == ["b"]
    # when c's heartbeats go on, with the retention, once it has passed
    time.sleep(RETENTION_MS / 1000 + 0.1)
    beat(c, epoch, retention_ms=RETENTION_MS)
    # then b's records are pruned as those of a node that beat are
    status = c.status()
    assert [n["id"] for n in status.nodes] == ["c"] and status.dead_nodes == []
    assert status.pruned["dead"] == 1
