"""A Redis outage is not a node's death: a stall or a cut shorter than the dead-after declares no
node dead, whether the first heartbeat after it is a node leaving or `clustersync check
--repair`, and a crawl through short outages loses nothing. (Deaths themselves:
tests/test_node_failover.py.)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from test_node_failover import FAILOVER, GAP_MS, GRACE_MS, beat

from scrapy_clustersync.store.consistency import JobCheck
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

from conftest import ProxyFactory, SiteFactory
from support import (
    joined,
    missing_pages,
    pages_fetched,
    push_op,
    start_nodes,
    wait_all,
    wait_until,
)


def stall_redis(server: RedisServer, seconds: float) -> None:
    """Freeze the redis-server process (a stall: a fork, a slow command, a VM pause)."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def node_records(client: Any, job: str) -> dict[bytes, bytes]:
    """Each node's record, which each of its heartbeats writes anew (its ``updated`` time);
    not its deadline, which another node's heartbeat after a gap moves on too."""
    return dict(client.hgetall(f"clustersync:{{{job}}}:node_info"))


def all_beat_since(client: Any, job: str, before: dict[bytes, bytes]) -> bool:
    """Every node of ``before`` has beat since."""
    now = node_records(client, job)
    return all(now.get(node) != record for node, record in before.items())


@pytest.mark.timing
def test_a_redis_stall_shorter_than_the_dead_threshold_declares_no_node_dead(
    redis_server: RedisServer,
) -> None:
    # given two nodes of a job with a dead-after of 1 s (heartbeats a third of it apart): a,
    # holding a lease, beat at t=0 and b at t=0.3; a's next heartbeat is due at t=0.33
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    a.flush(epoch, [push_op("http://x/1")], new_call_id())
    a.lease(epoch, 1, 60_000, new_call_id())
    beat(a, epoch, ttl_ms=1000, grace_ms=GRACE_MS, gap_ms=GAP_MS)
    time.sleep(0.3)
    beat(b, epoch, ttl_ms=1000, grace_ms=GRACE_MS, gap_ms=GAP_MS)
    # when Redis stalls for 0.85 s, less than the dead-after: no heartbeat reaches it
    stall_redis(redis_server, 0.85)
    # then the first heartbeat after the stall (b's) declares nobody dead for it
    answer = beat(b, epoch, ttl_ms=1000, grace_ms=GRACE_MS, gap_ms=GAP_MS)
    print(f"declared dead after a {0.85}s Redis stall (dead-after 1 s): {answer.declared_dead}")
    assert answer.declared_dead == ()
    assert beat(a, epoch, ttl_ms=1000, grace_ms=GRACE_MS, gap_ms=GAP_MS).my_death is None


def sleep_until(start: float, at_s: float) -> None:
    time.sleep(max(0.0, start + at_s - time.monotonic()))


@pytest.mark.timing
def test_a_node_back_later_than_another_after_a_short_outage_is_not_declared_dead_for_it(
    redis_server: RedisServer,
) -> None:
    # given two nodes (dead-after 3 s, heartbeats 1 s apart): a beat at t=0, b at t=0.9
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    options = {"ttl_ms": 3000, "grace_ms": 6000, "gap_ms": 2000}
    start = time.monotonic()
    beat(a, epoch, **options)
    sleep_until(start, 0.9)
    beat(b, epoch, **options)
    # when Redis is away until t=2.5 (no heartbeat for 1.6 s, less than two intervals), b's
    # heartbeat comes at once after it, a's only at t=3.6 (its retry came later): past its
    # deadline (t=3) by less than the outage, and b beats in between, at t=3.3
    sleep_until(start, 2.5)
    first = beat(b, epoch, **options).declared_dead
    sleep_until(start, 3.3)
    second = beat(b, epoch, **options).declared_dead
    sleep_until(start, 3.6)
    late = beat(a, epoch, **options)
    print(f"declared dead by b's heartbeats after the outage: {first}, {second}; "
          f"a told of its death: {late.my_death}")
    # then nobody is declared dead: the outage counts for a's deadline too
    assert (first, second, late.my_death) == ((), (), None)


def test_a_node_leaving_first_after_an_outage_does_not_make_the_others_dead_for_it(
    redis_server: RedisServer,
) -> None:
    # given three live nodes (dead-after 0.3 s)
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    c, _ = joined(redis_server, "c")
    for store in (a, b, c):
        beat(store, epoch, ttl_ms=300, grace_ms=1000)
    # when Redis is away for 0.4 s, and the first heartbeat after it is c's leaving one (c was
    # stopped during the outage: it sent its writes, then leaves), then a's
    time.sleep(0.4)
    declared = [beat(c, epoch, ttl_ms=0).declared_dead,
                beat(a, epoch, ttl_ms=300, grace_ms=1000).declared_dead]
    print(f"declared dead by c's leaving heartbeat, then by a's: {declared}")
    # then nobody is declared dead for the outage: a and b get the grace as if c had not left
    assert declared == [(), ()]
    assert redis_server.client().hlen("clustersync:{job}:dead_nodes") == 0


def test_check_repair_right_after_an_outage_hands_no_live_nodes_lease_to_another_node(
    redis_server: RedisServer,
) -> None:
    # given node a holding four leases (prefetched) and node b, both live (dead-after 0.3 s)
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    a.flush(epoch, [push_op(f"http://x/{i}") for i in range(4)], new_call_id())
    held = [entry.entry_id for entry in a.lease(epoch, 4, 60_000, new_call_id())]
    beat(a, epoch, ttl_ms=300, grace_ms=1000)
    beat(b, epoch, ttl_ms=300, grace_ms=1000)
    # when Redis is away for 0.4 s (no heartbeat reaches it), and the first call after it is a
    # cron'd `clustersync check --repair`
    time.sleep(0.4)
    findings = JobCheck(b).run(repair=True)
    print("check --repair right after the outage:", [(f.kind, f.action) for f in findings])
    # then, as the heartbeat declares nobody dead for the outage, a keeps what it holds ...
    answer = beat(a, epoch, ttl_ms=300, grace_ms=1000, lease_ids=held)
    assert answer.declared_dead == () and answer.my_death is None
    # ... and no other node can lease any of it: a crawls it, and b must not crawl it too
    taken_by_b = [entry.entry_id for entry in b.lease(epoch, 10, 60_000, new_call_id())]
    assert sorted(set(taken_by_b) & set(held)) == []


@pytest.mark.timing
def test_short_redis_outages_during_a_crawl_declare_no_node_dead_and_lose_nothing(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path
) -> None:
    # given two nodes crawling through a proxy to Redis (heartbeat 0.5 s, dead-after 1.5 s)
    proxy = proxy_factory(redis_server)
    web = site(600, delay_s=0.3)
    client = redis_server.client()
    nodes = start_nodes(2, proxy.url(), web.start_url, tmp_path,
                        {**FAILOVER, "CLUSTERSYNC_SOCKET_TIMEOUT": "1"})
    wait_until(lambda: pages_fetched(web) >= 30, 60, "30 pages")
    # when Redis stops answering eight times for 0.75 s (less than the dead-after), each time
    # once every node has beat again since the last (a stall, a failover): calls hang, fail
    # when it is back, and are retried
    for _ in range(8):
        beats = node_records(client, "site")
        proxy.cut(blackhole=True)
        time.sleep(0.75)  # the outage itself
        proxy.restore()
        wait_until(lambda: all_beat_since(client, "site", beats), 30,  # noqa: B023
                   "every node to beat again after the outage")
    declared = int(client.hget("clustersync:{site}:stats", "declared_dead") or 0)
    told = sum(node.log().count("was declared dead by node") for node in nodes)
    print(f"after 8 Redis outages of 0.75s (dead-after 1.5s): {declared} nodes declared dead, "
          f"{told} told so; {pages_fetched(web)} pages fetched so far")
    wait_all(nodes, timeout_s=90)
    # then no node was declared dead for them, and no page is lost
    assert missing_pages(web) == []
    assert (declared, told) == (0, 0)


@pytest.mark.timing
def test_a_lone_node_beating_late_still_declares_a_killed_node_dead(
    redis_server: RedisServer,
) -> None:
    # given two nodes (dead-after 1 s, heartbeats 1/3 s apart, an outage grace of 1 s); b holds
    # a lease, and both beat
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    b.flush(epoch, [push_op("http://x/1")], new_call_id())
    b.lease(epoch, 1, 60_000, new_call_id())
    options = {"ttl_ms": 1000, "grace_ms": 1000, "gap_ms": GAP_MS}
    beat(a, epoch, **options)
    beat(b, epoch, **options)
    # when b dies and a, alone, beats late each time (0.7 s apart: more than two intervals, as
    # a node far from Redis or on a busy machine does), so that every gap looks like an outage
    died_at = time.monotonic()
    declared: tuple[Any, ...] = ()
    while not declared and time.monotonic() - died_at < 15:
        time.sleep(0.7)
        declared = beat(a, epoch, **options).declared_dead
    waited_s = time.monotonic() - died_at
    print(f"b declared dead {waited_s:.1f}s after its last heartbeat, by a beating 0.7 s apart")
    # then b is declared dead all the same, its lease back, a few thresholds and graces later
    # (each late beat of a moved its deadline on while it had been heard from shortly before)
    assert [d.node for d in declared] == ["b"] and declared[0].leases == 1
    assert waited_s < 10
