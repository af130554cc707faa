"""End to end: real `scrapy crawl` nodes, a real redis-server, a site served by the test."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest
import redis

from testkit.redis_server import RedisServer

from conftest import ProxyFactory, RedisFactory, SiteFactory
from support import (
    missing_pages,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)


def test_two_nodes_fetch_every_page_exactly_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a 400-page site and two nodes on one Redis
    web = site(400)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path)
    # when they crawl it together
    wait_all(nodes)
    # then every page is fetched once, both nodes did work and both finished together
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}
    assert pages_fetched(web) == 400
    by_agent = web.hits_by_agent()
    assert all(sum(by_agent.get(node.name, {}).values()) > 0 for node in nodes), by_agent
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]


@pytest.mark.timing
def test_three_nodes_fetch_each_page_once_and_the_start_page_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given three nodes whose spiders all have a start() yielding page 0
    web = site(300, delay_s=0.005)
    nodes = start_nodes(3, redis_server.url, web.start_url, tmp_path)
    wait_all(nodes)
    by_agent = web.hits_by_agent()
    assert all(sum(by_agent.get(node.name, {}).values()) > 0 for node in nodes), by_agent
    # then start() ran on exactly one node, and every page, the start page too, came once
    assert sum("runs the spider's start()" in node.log() for node in nodes) == 1
    assert web.hits()["/page/0.html"] == 1
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}
    # and the job ended for all three together (within a couple of heartbeats)
    closed = sorted(node.closed_at() for node in nodes)
    assert (closed[-1] - closed[0]).total_seconds() <= 2
    assert [node.finish_reason() for node in nodes] == ["finished"] * 3


def test_a_node_joining_after_start_does_not_seed_again(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a finished crawl
    web = site(50)
    wait_all([start_node("first", redis_server.url, web.start_url, tmp_path,
                         settings={"START_DONT_FILTER": "1"})])
    # when a node of the same job starts later, with a dont_filter start request
    late = start_node("late", redis_server.url, web.start_url, tmp_path,
                      settings={"START_DONT_FILTER": "1"})
    wait_all([late])
    # then it fetched nothing: start() does not run twice for one job, and the node says the
    # job finished (tests/test_finished_jobs.py)
    assert web.hits_by_agent().get("late", {}) == {}
    assert "job 'site' already finished at" in late.log()


def test_killed_node_loses_no_page_and_its_restart_joins_in(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow site
    web = site(600, delay_s=0.01)
    victim, survivor = start_nodes(2, redis_server.url, web.start_url, tmp_path)
    wait_until(lambda: sum(web.hits_by_agent().get("node1", {}).values()) >= 60, 60,
               "node1 to fetch 60 pages")
    # when one is killed with SIGKILL mid-crawl (its leases are never released) and restarted
    victim.kill()
    restarted = start_node("node1-restarted", redis_server.url, web.start_url, tmp_path)
    wait_all([survivor, restarted])
    # then no page is lost; only pages the dead node held may have been fetched twice
    assert missing_pages(web) == []
    held_at_most = 16 + 32  # CONCURRENT_REQUESTS + prefetch of the killed node
    assert len(pages_fetched_twice(web)) <= held_at_most
    status = redis_server.client().hgetall("clustersync:{site}:stats")
    assert int(status[b"acked"]) == 600
    assert int(status.get(b"reclaimed", 0)) > 0


def test_redis_restart_mid_crawl_loses_nothing(
    redis_factory: RedisFactory, site: SiteFactory, tmp_path: Path
) -> None:
    # given a Redis that persists every write, and two nodes crawling
    redis = redis_factory(persistence=True)
    web = site(500, delay_s=0.01)
    nodes = start_nodes(2, redis.url, web.start_url, tmp_path)
    wait_until(lambda: pages_fetched(web) >= 100, 60, "100 pages")
    # when Redis restarts mid-crawl and is down for two seconds
    redis.restart(down_s=2.0)
    wait_all(nodes)
    # then the crawl completes with every page, and each node reported the outage once
    assert missing_pages(web) == []
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]
    for node in nodes:
        log = node.log()
        assert log.count("is unreachable") == 1
        assert log.count("reachable again") == 1


def every_lease_ran_out(client: redis.Redis, job: str) -> bool:
    """No lease of ``job`` runs beyond now, on the Redis server's clock."""
    seconds, micros = client.time()
    latest = client.zrange(f"clustersync:{{{job}}}:deadlines", -1, -1, withscores=True)
    return not latest or float(latest[0][1]) < seconds * 1000 + micros / 1000


@pytest.mark.parametrize("blackhole", [False, True], ids=["refused", "replies-lost"])
def test_redis_unreachable_longer_than_a_lease_loses_nothing(
    blackhole: bool, redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory,
    tmp_path: Path,
) -> None:
    # given two nodes that reach Redis through a proxy, with 2-second leases; with a blackhole,
    # calls under way at the cut reach Redis but their replies are lost
    proxy = proxy_factory(redis_server)
    web = site(500, delay_s=0.01)
    settings = {"CLUSTERSYNC_LEASE_TIMEOUT": "2", "CLUSTERSYNC_SOCKET_TIMEOUT": "1"}
    nodes = start_nodes(2, proxy.url(), web.start_url, tmp_path, settings)
    wait_until(lambda: pages_fetched(web) >= 100, 60, "100 pages")
    # when the network to Redis is cut for longer than a lease
    proxy.cut(blackhole=blackhole)
    before = pages_fetched(web)
    wait_until(lambda: all("is unreachable" in n.log() for n in nodes), 20, "both nodes to notice")
    wait_until(lambda: every_lease_ran_out(redis_server.client(), "site"), 20,
               "every lease to run out on Redis' clock")
    proxy.restore()
    wait_all(nodes)
    # then the nodes kept crawling what they held, and after the cut everything was fetched
    assert before < 500
    assert missing_pages(web) == []
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]
    assert all(node.log().count("reachable again") == 1 for node in nodes)


def test_redis_restarted_empty_is_reported_instead_of_recrawling(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling with a Redis that keeps nothing on disk
    web = site(500, delay_s=0.01)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path)
    wait_until(lambda: pages_fetched(web) >= 100, 60, "100 pages")
    # when Redis restarts empty
    redis_server.restart(down_s=0.5)
    wait_all(nodes)
    # then each node stops with a clear reason instead of crawling the site again
    assert [node.finish_reason() for node in nodes] == ["clustersync_state_lost"] * 2
    assert all("is gone from Redis" in node.log() for node in nodes)
    assert pages_fetched_twice(web) == {}


def test_sigterm_hands_back_leases_at_once_and_loses_nothing(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes with leases far longer than the crawl
    web = site(500, delay_s=0.01)
    settings = {"CLUSTERSYNC_LEASE_TIMEOUT": "600"}
    leaving, staying = start_nodes(2, redis_server.url, web.start_url, tmp_path, settings)
    wait_until(lambda: sum(web.hits_by_agent().get("node1", {}).values()) >= 60, 60,
               "node1 to fetch 60 pages")
    # when one node gets SIGTERM (a graceful stop)
    leaving.process.terminate()
    assert leaving.wait(60) == 0
    wait_all([staying], timeout_s=90)
    # then it released what it held, so the other node finished everything without waiting
    # for a lease to expire, and no page is lost
    assert leaving.finish_reason() == "shutdown"
    assert staying.finish_reason() == "finished"
    assert missing_pages(web) == []
    stats = redis_server.client().hgetall("clustersync:{site}:stats")
    assert int(stats.get(b"released", 0)) > 0 and int(stats.get(b"reclaimed", 0)) == 0


#: the opcodes the previous version (f14391e, before issue 10) reads back from a spool file
PREVIOUS_VERSION_OPCODES = {"P", "A", "N", "D", "X", "S"}


def test_writes_a_node_could_not_send_before_stopping_are_sent_by_the_next_node(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path
) -> None:
    # given a node crawling through a proxy to Redis
    proxy = proxy_factory(redis_server)
    web = site(400, delay_s=0.01)
    # (without results: a spool with them holds R ops, which the previous version does not read;
    # tests/test_results_crawl.py spools them)
    first = start_node("first", proxy.url(), web.start_url, tmp_path,
                       {"CLUSTERSYNC_SOCKET_TIMEOUT": "1", "CLUSTERSYNC_RESULTS": "False"})
    wait_until(lambda: pages_fetched(web) >= 60, 60, "60 pages")
    # when Redis becomes unreachable and the node is stopped (SIGTERM) before it comes back
    proxy.cut()
    wait_until(lambda: "is unreachable" in first.log(), 20, "the node to notice")
    time.sleep(0.5)
    first.process.terminate()
    assert first.wait(60) == 0
    assert "writes are kept in" in first.log()
    # and its spool file holds only ops the previous version reads too (no task, no failure:
    # docs/architecture.md; stats counts are never spooled)
    [path] = list((tmp_path / "spool").rglob("*.spool"))
    spool = msgpack.unpackb(path.read_bytes(), raw=False)
    assert {op[0] for _, ops in spool["batches"] for op in ops} <= PREVIOUS_VERSION_OPCODES
    proxy.restore()
    # then the next node started in the same place sends them, and no page is lost
    second = start_node("second", redis_server.url, web.start_url, tmp_path)
    wait_all([second], timeout_s=120)
    assert "spooled in" in second.log()
    assert missing_pages(web) == []
    assert second.finish_reason() == "finished"
