"""A Redis that is up but cannot take writes (failover, OOM, ...) is an outage, not a refusal.

The node must buffer and retry as for a lost connection, and reconnect, so that after a
failover it follows its Redis address to the new primary instead of asking the old one, now a
replica, for ever. Which reply is an outage is tested in tests/unit/test_store_errors.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from scrapy_clustersync.store import (
    StoreUnavailable,
)
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import ProxyFactory, RedisFactory, SiteFactory
from support import (
    Node,
    fail_over,
    in_sync,
    joined,
    missing_pages,
    pages_fetched,
    push_op,
    replicate,
    start_nodes,
    wait_all,
    wait_until,
)

#: a replica's first full sync starts at once, not after the default 5 s wait for others
REPLICATION = ["--repl-diskless-sync-delay", "0"]


def connection_ids(server_client: redis.Redis) -> set[int]:
    return {int(each["id"]) for each in server_client.client_list()}


def test_a_flush_to_a_server_demoted_to_replica_is_an_outage_and_reconnects_once_promoted(
    redis_factory: RedisFactory,
) -> None:
    # given a node's store joined on a primary, and a second server in sync with it
    primary, other = redis_factory(extra_args=REPLICATION), redis_factory(extra_args=REPLICATION)
    store, epoch = joined(primary.url)
    store.flush(epoch, [push_op("http://a/1")], new_call_id())
    first_connection = store.client.client_id()
    replicate(other, primary)
    # when a failover makes the other server the primary and this one its replica
    fail_over(primary, other)
    watcher = primary.client()
    wait_until(lambda: in_sync(watcher), 30, "the demoted server to sync")
    call_id = new_call_id()
    with pytest.raises(StoreUnavailable, match=r"read-only replica now \(failover\?\)"):
        store.flush(epoch, [push_op("http://a/2")], call_id)
    # then the connection that got READONLY was closed, and once the server is primary
    # again the retried call succeeds on a new connection
    wait_until(lambda: first_connection not in connection_ids(watcher), 5,
               "the pooled connection to be closed")
    watcher.replicaof("NO", "ONE")
    assert store.flush(epoch, [push_op("http://a/2")], call_id).pushed == 1
    assert store.client.client_id() != first_connection


def test_a_flush_to_a_server_out_of_memory_is_an_outage_and_goes_through_once_memory_frees(
    redis_server: RedisServer,
) -> None:
    # given a node's store joined on a Redis that then reaches its maxmemory (noeviction)
    store, epoch = joined(redis_server.url)
    admin = redis_server.client()
    admin.config_set("maxmemory", 1)
    call_id = new_call_id()
    # when the node flushes, it is told Redis is out of memory: an outage, nothing lost
    with pytest.raises(StoreUnavailable, match="out of memory"):
        store.flush(epoch, [push_op("http://a/1")], call_id)
    # then once memory frees up the same call goes through
    admin.config_set("maxmemory", 0)
    assert store.flush(epoch, [push_op("http://a/1")], call_id).pushed == 1


def each_fetched(web: TestSite, nodes: list[Node], pages: int) -> bool:
    by_agent = web.hits_by_agent()
    return all(sum(by_agent.get(node.name, {}).values()) >= pages for node in nodes)


def assert_one_outage_and_one_recovery(nodes: list[Node], words: str) -> None:
    for node in nodes:
        log = node.log()
        assert log.count("is unreachable") == 1, log[-3000:]
        assert words in log
        assert log.count("reachable again") == 1, log[-3000:]
        assert "Redis refused a call" not in log


def test_failover_to_a_replica_mid_crawl_loses_nothing(
    redis_factory: RedisFactory, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path
) -> None:
    # given two nodes crawling through a proxy (a DNS name or VIP) to a primary, and a
    # second server that becomes its replica mid-crawl
    primary = redis_factory(extra_args=REPLICATION)
    replica = redis_factory(extra_args=REPLICATION)
    proxy = proxy_factory(primary)
    web = site(500, delay_s=0.01)
    nodes = start_nodes(2, proxy.url(), web.start_url, tmp_path)
    wait_until(lambda: each_fetched(web, nodes, 40), 60, "each node to fetch 40 pages")
    replicate(replica, primary)
    wait_until(lambda: pages_fetched(web) >= 160, 60, "160 pages")
    # when the replica is promoted, the old primary demoted to its replica, and the address
    # moved to the new primary (the nodes' open connections still reach the old one)
    fail_over(primary, replica, proxy)
    before = pages_fetched(web)
    wait_all(nodes, timeout_s=90)
    # then each node reported one outage saying why and one recovery, followed the address to
    # the new primary, and the crawl completed there with every page
    assert before < 500
    assert missing_pages(web) == []
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]
    assert_one_outage_and_one_recovery(nodes, "read-only replica now (failover?)")
    assert int(replica.client().hget("clustersync:{site}:stats", "acked") or 0) >= 500


def test_redis_out_of_memory_mid_crawl_loses_nothing(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling
    web = site(500, delay_s=0.01)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path)
    wait_until(lambda: each_fetched(web, nodes, 50), 60, "each node to fetch 50 pages")
    # when Redis reaches its maxmemory (noeviction) for a while, then memory frees up
    admin = redis_server.client()
    admin.config_set("maxmemory", 1)
    wait_until(lambda: all("out of memory" in node.log() for node in nodes), 20,
               "both nodes to notice")
    admin.config_set("maxmemory", 0)
    wait_all(nodes, timeout_s=90)
    # then the writes waited in the nodes, and the crawl completed with every page
    assert missing_pages(web) == []
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]
    assert_one_outage_and_one_recovery(nodes, "out of memory")
