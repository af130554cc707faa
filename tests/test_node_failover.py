"""A node whose heartbeats stop is declared dead by the others within CLUSTERSYNC_NODE_DEAD_AFTER
(plus one of their heartbeats), in one step with putting its leases back in the queue; a node
declared dead that comes back drops what it held, acks nothing twice and rejoins; start() moves
on to a live node. (tests/test_failover.py is about a failover of Redis itself.)
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.settings import Settings
from test_guarantees import SPIDERS
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import Ack, JobStore, StartDone, make_client
from scrapy_clustersync.store.consistency import JobCheck
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.records import as_text
from scrapy_clustersync.store.script_results import Declared
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import SiteFactory
from support import (
    Node,
    chaos_runs,
    chaos_seed,
    chaos_soak,
    clustersync,
    joined,
    marks,
    missing_pages,
    node_env,
    open_barrier,
    pages_fetched,
    pages_fetched_twice,
    project_with_spiders,
    push_op,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

HEARTBEAT_S = 0.5
DEAD_AFTER_S = 1.5
#: leases far longer than the death threshold: what returns a dead node's work is its death
FAILOVER = {"CLUSTERSYNC_HEARTBEAT_INTERVAL": str(HEARTBEAT_S),
            "CLUSTERSYNC_NODE_DEAD_AFTER": str(DEAD_AFTER_S),
            "CLUSTERSYNC_LEASE_TIMEOUT": "30", "CONCURRENT_REQUESTS": "4"}
#: every field of a node record (the CLI reads them by these names)
NODE_RECORD_FIELDS = {
    "node", "host", "ip", "pid", "started", "updated", "state", "cpu_percent", "rss_bytes",
    "load_avg", "concurrency", "inflight", "leased", "prefetched", "buffered", "pages", "items",
    "errors", "pages_per_min", "settings_version", "versions", "digest", "spider", "runs_start",
}
#: what the measured time may exceed DEAD_AFTER_S + one heartbeat by: polling, a busy machine
MARGIN_S = 1.0
#: what the worker sends as the outage grace: the reconnect backoff (5 s) plus one heartbeat
GRACE_MS = 5_000 + 333
#: what the worker passes as the gap that earns the grace: two heartbeat intervals (1/3 s here)
GAP_MS = 666


def beat(store: JobStore, epoch: str, ttl_ms: int = 10_000, **kw: Any) -> Any:
    options: dict[str, Any] = {"lease_ms": 60_000, "info": {}, "idle": False,
                               "idle_after_ms": 1000, "lease_ids": []}
    return store.heartbeat(epoch, ttl_ms=ttl_ms, **(options | kw))


# ---- the heartbeat script, deterministic --------------------------------------------------------

def test_a_silent_node_is_declared_dead_with_its_leases_back_in_the_queue_in_their_place(
    redis_server: RedisServer,
) -> None:
    # given node a holding two leases and node b one, of three requests of three priorities
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    a.flush(epoch, [push_op(f"http://x/{p}", priority=p) for p in (3, 2, 1)], new_call_id())
    held = [entry.entry_id for entry in a.lease(epoch, 2, 60_000, new_call_id())]
    b.lease(epoch, 1, 60_000, new_call_id())
    beat(a, epoch, ttl_ms=300, info={"leased": 2, "inflight": 2})
    # when a sends no heartbeat for longer than its dead-after, and b's heartbeat comes
    time.sleep(0.4)
    answer = beat(b, epoch)
    # then b declared a dead in that call, and a's two leases are queued again, first in line
    assert [(d.node, d.leases) for d in answer.declared_dead] == [("a", 2)]
    assert [entry.entry_id for entry in b.lease(epoch, 5, 60_000, new_call_id())] == held
    status = b.status()
    [dead] = status.dead_nodes
    assert (dead.node, dead.by, dead.leases_returned) == ("a", "b", 2)
    assert dead.record == {"leased": 2, "inflight": 2}
    assert [n["state"] for n in status.nodes if n["id"] == "a"] == ["dead"]
    assert (status.counters["reclaimed"], status.counters["declared_dead"]) == (2, 1)


def test_a_node_declared_dead_learns_it_rejoins_and_its_late_ack_counts_once(
    redis_server: RedisServer,
) -> None:
    # given node a declared dead while it held a lease, which b then leased
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    a.flush(epoch, [push_op("http://x/1")], new_call_id())
    [entry] = a.lease(epoch, 1, 60_000, new_call_id())
    beat(a, epoch, ttl_ms=300)
    time.sleep(0.4)
    beat(b, epoch)
    assert [e.entry_id for e in b.lease(epoch, 1, 60_000, new_call_id())] == [entry.entry_id]
    # when a comes back: its next heartbeat tells it, and its lease is not renewed
    answer = beat(a, epoch, lease_ids=[entry.entry_id])
    death = answer.my_death
    assert death is not None and (death.by, death.leases_returned) == ("b", 1)
    # (a heartbeat retried after its answer was lost tells it again, until a says it knows)
    assert beat(a, epoch).my_death == death
    assert beat(a, epoch, told_ms=death.declared_ms).my_death is None
    # and a finishes the request and acks it, then b does too
    a.flush(epoch, [Ack(entry.entry_id)], new_call_id())
    b.flush(epoch, [Ack(entry.entry_id)], new_call_id())
    # then a is live again and no longer listed dead, and the request was counted done once
    status = b.status()
    assert status.dead_nodes == []
    assert redis_server.client().hlen("clustersync:{job}:dead_nodes") == 0
    assert [n["alive"] for n in status.nodes if n["id"] == "a"] == [True]
    assert (status.counters["acked"], status.queued, status.leased) == (1, 0, 0)


@pytest.mark.timing
def test_no_node_is_declared_dead_for_a_gap_in_which_no_heartbeat_reached_redis(
    redis_server: RedisServer,
) -> None:
    # given two live nodes, then a gap longer than their dead-after in which no heartbeat
    # arrives at all (Redis was away, or every node stood still)
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    beat(a, epoch, ttl_ms=300)
    beat(b, epoch, ttl_ms=300)
    time.sleep(0.4)
    # when the first heartbeat after it comes, then nobody is declared dead: b gets the grace
    assert beat(a, epoch, ttl_ms=300, grace_ms=1000).declared_dead == ()
    graced_at = time.monotonic()
    # and a node that stays silent past the grace, while a beats on, is declared dead then
    declared: tuple[Declared, ...] = ()
    while not declared and time.monotonic() < graced_at + 3:
        time.sleep(0.1)
        declared = beat(a, epoch, ttl_ms=300, grace_ms=1000).declared_dead
    assert [(d.node, d.leases) for d in declared] == [("b", 0)]
    assert time.monotonic() - graced_at >= 1.2


def test_a_dead_start_owner_hands_start_over_in_the_call_that_declares_it_dead(
    redis_server: RedisServer,
) -> None:
    # given node a that claimed start() and did not exhaust it, and node b waiting
    client = make_client(redis_server.url)
    a, b = JobStore(client, "job", "a"), JobStore(client, "job", "b")
    epoch, claimed = a.join(ttl_ms=300)
    assert claimed and b.join(ttl_ms=10_000)[1] is False
    assert beat(b, epoch).start == "other"
    # when a stops sending heartbeats past its dead-after
    time.sleep(0.4)
    answer = beat(b, epoch)
    # then b's heartbeat declared a dead and took start() over, and b can finish it
    assert ([(d.node, d.leases) for d in answer.declared_dead], answer.start) == (
        [("a", 0)], "mine")
    b.flush(epoch, [StartDone()], new_call_id())
    assert beat(b, epoch).start == "done"


# ---- real nodes ---------------------------------------------------------------------------------

def node_id_of(client: redis.Redis, job: str, node: Node) -> str:
    """The cluster's id of ``node`` (its record carries its pid)."""
    for raw_id, raw in client.hgetall(f"clustersync:{{{job}}}:node_info").items():
        if json.loads(raw).get("pid") == node.process.pid:
            return as_text(raw_id)
    raise AssertionError(f"{node.name} has no node record")


def leases_of(client: redis.Redis, job: str, node_id: str) -> int:
    values = client.hvals(f"clustersync:{{{job}}}:leased")
    return sum(as_text(value).split("|", 1)[1] == node_id for value in values)


def dead_record(client: redis.Redis, job: str, node_id: str) -> dict[str, Any] | None:
    raw = client.hget(f"clustersync:{{{job}}}:dead_nodes", node_id)
    return json.loads(raw) if raw else None


def fetched_by(web: TestSite, name: str) -> int:
    return sum(web.hits_by_agent().get(name, {}).values())


def status_json(url: str, job: str) -> dict[str, Any]:
    result = clustersync(url, "status", job, "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.mark.timing
def test_a_killed_node_is_declared_dead_in_seconds_and_the_other_finishes_every_page(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow-ish site, with 30-second leases (200 pages: the survivor
    # cannot end the job before it declared the victim dead, its leases being out for 30 s)
    web = site(200, delay_s=0.1)
    client = redis_server.client()
    victim, survivor = start_nodes(2, redis_server.url, web.start_url, tmp_path, FAILOVER)
    wait_until(lambda: fetched_by(web, "node1") >= 40, 60, "node1 to fetch 40 pages")
    victim_id = node_id_of(client, "site", victim)
    # when one is killed with SIGKILL and not restarted
    victim.kill()
    killed_at = time.monotonic()
    wait_until(lambda: dead_record(client, "site", victim_id) is not None, 30,
               "the killed node to be declared dead")
    back_s = time.monotonic() - killed_at
    returned = dead_record(client, "site", victim_id)["leases_returned"]  # type: ignore[index]
    print(f"killed node declared dead and its {returned} leases back in the queue {back_s:.2f}s "
          f"after the kill (NODE_DEAD_AFTER {DEAD_AFTER_S}s, heartbeat {HEARTBEAT_S}s)")
    # then its leases were back in the queue within NODE_DEAD_AFTER + one heartbeat, in one step
    # with the death (no lease of it is left once the record exists), long before they expire
    assert returned > 0
    assert leases_of(client, "site", victim_id) == 0
    assert back_s <= DEAD_AFTER_S + HEARTBEAT_S + MARGIN_S
    # and status lists it as dead, with when, by whom and what it held
    report = status_json(redis_server.url, "site")
    [dead] = report["dead_nodes"]
    assert (dead["node"], dead["leases_returned"]) == (victim_id, returned)
    assert dead["held"]["leased"] > 0
    assert dead["by"] == node_id_of(client, "site", survivor) and dead["declared_at"]
    assert set(dead["held"]) == {"leased", "prefetched", "inflight", "buffered"}
    assert [n["state"] for n in report["nodes"] if n["id"] == victim_id] == ["dead"]
    [live] = [n for n in report["nodes"] if n["alive"]]
    assert set(live) >= NODE_RECORD_FIELDS and live["state"] in ("crawling", "idle")
    # and the other node finishes the crawl with every page
    wait_all([survivor], timeout_s=90)
    assert missing_pages(web) == []
    assert survivor.finish_reason() == "finished"
    assert "declared dead; its" in survivor.log()


def test_a_node_frozen_past_the_dead_threshold_loses_nothing_acks_once_and_rejoins(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling
    web = site(400, delay_s=0.1)
    client = redis_server.client()
    frozen, other = start_nodes(2, redis_server.url, web.start_url, tmp_path, FAILOVER)
    wait_until(lambda: fetched_by(web, "node1") >= 40, 60, "node1 to fetch 40 pages")
    frozen_id = node_id_of(client, "site", frozen)
    # when one is frozen (SIGSTOP) until the other declared it dead and crawled on, then woken
    frozen.process.send_signal(signal.SIGSTOP)
    wait_until(lambda: dead_record(client, "site", frozen_id) is not None, 30,
               "the frozen node to be declared dead")
    crawled_at_death = fetched_by(web, other.name)
    wait_until(lambda: fetched_by(web, other.name) >= crawled_at_death + 5, 30,
               "the other node to crawl on")
    frozen.process.send_signal(signal.SIGCONT)
    woken_with = fetched_by(web, "node1")
    # then it learns it was declared dead, says so once, and is live again
    wait_until(lambda: dead_record(client, "site", frozen_id) is None, 15, "it to rejoin")
    wait_all([frozen, other], timeout_s=90)
    log = frozen.log()
    assert log.count("was declared dead by node") == 1, log[-3000:]
    # and it crawled on after it woke (beyond what it had under way then)
    print(f"node1 fetched {woken_with} pages before it woke, "
          f"{fetched_by(web, 'node1') - woken_with} after it woke")
    assert fetched_by(web, "node1") > woken_with + 8
    # and no page is lost, none was acked twice, both nodes ended the job normally
    assert missing_pages(web) == []
    stats = client.hgetall("clustersync:{site}:stats")
    assert int(stats[b"acked"]) == 400
    assert [frozen.finish_reason(), other.finish_reason()] == ["finished", "finished"]




@pytest.mark.timing
def test_the_start_owner_killed_mid_start_is_taken_over_once_declared_dead(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a spider whose start() yields 40 pages, holding after the first 5 until the test
    # lets it go on, run by the first of two nodes (the spider is test_guarantees.py's)
    web = site(40)
    project = project_with_spiders(tmp_path, "guarantees", SPIDERS)
    settings = {**FAILOVER, "PAGES": "40", "START_SLEEP": "0", "START_HOLD_AT": "5"}

    def node(name: str) -> Node:
        return start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                          project_dir=project, spider="slowstart", env=node_env(tmp_path))

    owner = node("owner")
    wait_until(lambda: len(marks(tmp_path, "started")) >= 5, 60, "start() to be held half-way")
    other = node("other")
    wait_until(lambda: "joined job" in other.log(), 60, "the second node to join")
    # (both have sent a heartbeat: a node killed between its join and its first heartbeat has
    # the longer start-up liveness, twice the threshold; see docs/guarantees.md)
    seen = redis_server.client()
    wait_until(lambda: seen.zcard("clustersync:{slowstart}:node_seen") == 2, 10,
               "both nodes' first heartbeats")
    # when the node running start() is killed while start() is held half-way
    owner.kill()
    killed_at = time.monotonic()
    wait_until(lambda: "runs it now" in other.log(), 30, "the other node to take start() over")
    taken_over_s = time.monotonic() - killed_at
    print(f"start() taken over {taken_over_s:.2f}s after the owner's kill")
    # (the waiting start() wakes on the heartbeat's answer that hands the claim over)
    assert taken_over_s <= DEAD_AFTER_S + HEARTBEAT_S + MARGIN_S
    open_barrier(tmp_path, "go_on")
    wait_all([other], timeout_s=90)
    # then the other node declared it dead, ran start() and the crawl completed
    assert all(not line.startswith("other") for line in marks(tmp_path, "started")[:5])
    assert any(line.startswith("other") for line in marks(tmp_path, "started"))
    assert "declared dead; its" in other.log()
    assert missing_pages(web) == []
    assert other.finish_reason() == "finished"


# ---- a node back from the dead ------------------------------------------------------------------

def lease_owners(client: Any, job: str) -> dict[str, str]:
    return {as_text(i): as_text(v).split("|", 1)[1]
            for i, v in client.hgetall(f"clustersync:{{{job}}}:leased").items()}


def test_a_node_back_from_the_dead_hands_out_only_entries_redis_has_leased_to_it(
    redis_server: RedisServer,
) -> None:
    # given a node (batches of 2 writes, 8 prefetched) holding 8 prefetched leases
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": redis_server.url, "CLUSTERSYNC_BATCH_SIZE": "2",
        "CLUSTERSYNC_PREFETCH": "8", "CLUSTERSYNC_HEARTBEAT_INTERVAL": "0.2",
        "CLUSTERSYNC_NODE_DEAD_AFTER": "0.5", "CLUSTERSYNC_LEASE_TIMEOUT": "30"}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=500, claim=False)[0]
    other, _ = joined(redis_server, "b")
    other.flush(epoch, [push_op(f"http://x/{i}") for i in range(8)], new_call_id())
    node = NodeThread(store, config, epoch)  # its Redis thread's turns run here, by hand
    worker = node.worker
    worker._follow(time.monotonic())  # as its join does: the control state first
    worker._turn(time.monotonic())  # the first heartbeat, a lease of 8
    node.pump()
    assert node.link.waiting == 8
    # when it stands still past its dead-after, node b declares it dead (its 8 leases go back
    # to the queue), and then its Redis thread runs on
    time.sleep(0.7)
    assert [(d.node, d.leases) for d in beat(other, epoch).declared_dead] == [(config.node_id, 8)]
    for _ in range(12):
        worker._receive(time.monotonic())
        worker._turn(time.monotonic())
        node.pump()
    # then each entry it has prefetched (and will hand to its engine) is leased to it in Redis:
    # none is queued, where node b leases it and crawls it too
    owners = lease_owners(redis_server.client(), "job")
    prefetched = node.link._prefetched.entry_ids()
    not_its_own = [i for i in prefetched if owners.get(i) != config.node_id]
    print(f"prefetched {len(prefetched)}, of which leased to it in Redis: "
          f"{len(prefetched) - len(not_its_own)}; not its own: {len(not_its_own)}")
    taken_by_b = {entry.entry_id for entry in other.lease(epoch, 10, 60_000, new_call_id())}
    assert not_its_own == []
    assert taken_by_b & set(prefetched) == set()


# ---- stuck and frozen nodes ---------------------------------------------------------------------

def test_a_node_whose_reactor_is_stuck_does_not_keep_its_pages_for_ever(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """A node whose reactor is blocked (a synchronous call that never returns, in a callback
    or a pipeline) is as dead to the crawl as a SIGSTOPped one, but its Redis thread
    (worker.py SyncWorker._run) keeps heartbeating and renewing every lease it holds
    (heartbeat.lua renews ``held`` regardless of progress). Its pages are never reclaimed:
    pages reachable only through them are never crawled, and the job never finishes."""
    web = site(20, links_per_page=1)
    stuck = start_node("stuck", redis_server.url, web.start_url, tmp_path, {"STUCK": "1"},
                       project_dir=fault_project, spider="stuck", env=node_env(tmp_path))
    healthy = None
    try:
        wait_until(lambda: marks(tmp_path, "stuck") != [], 60, "the reactor to block")
        healthy = start_node("healthy", redis_server.url, web.start_url, tmp_path, {},
                             project_dir=fault_project, spider="stuck", env=node_env(tmp_path))
        # a lease is 3 s here: far more than enough for page 5 to be reclaimed and crawled
        deadline = time.monotonic() + 45
        while missing_pages(web) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert missing_pages(web) == []
    finally:
        stuck.kill()
        if healthy is not None:
            healthy.kill()


#: the freeze soak's site and how long it freezes nodes; a quick run (make test) still makes
#: several freezes, some past the dead threshold, on a crawl that outlasts them
FREEZE_PAGES = 500 if chaos_soak() else 250
FREEZE_WINDOW_S = 18 if chaos_soak() else 8


@pytest.mark.chaos
@pytest.mark.parametrize("run", range(chaos_runs()), ids=lambda run: f"run{run + 1}")
def test_random_freezes_of_two_nodes_lose_no_page_and_count_each_once(
    run: int, redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow site (heartbeat 0.5 s, dead-after 1.5 s)
    seed = chaos_seed()
    rng = random.Random(seed)
    web = site(FREEZE_PAGES, delay_s=0.1)
    client = redis_server.client()
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {**FAILOVER, "CLUSTERSYNC_BATCH_SIZE": "3"})
    wait_until(lambda: pages_fetched(web) >= 30, 60, "30 pages")
    # when, for 18 s (8 s in a quick run), a node picked at random is frozen (SIGSTOP) for 0.3
    # to 3 s at a time
    freezes = []
    until = time.monotonic() + FREEZE_WINDOW_S
    while time.monotonic() < until and all(n.process.poll() is None for n in nodes):
        victim = rng.choice(nodes)
        frozen_s = rng.uniform(0.3, 3.0)
        victim.process.send_signal(signal.SIGSTOP)
        time.sleep(frozen_s)
        victim.process.send_signal(signal.SIGCONT)
        freezes.append((victim.name, round(frozen_s, 2)))
        time.sleep(rng.uniform(0.2, 1.5))
    wait_all(nodes, timeout_s=90)
    assert freezes, "no node was frozen: the crawl ended before the first freeze"
    stats = {as_text(k): int(v) for k, v in client.hgetall("clustersync:{site}:stats").items()}
    twice = pages_fetched_twice(web)
    print(f"seed {seed}; freezes {freezes}; declared dead {stats.get('declared_dead', 0)}; "
          f"acked {stats.get('acked')}; pages fetched twice {len(twice)}")
    # then no page is lost, each is counted done once, both nodes end normally, and the job's
    # structures are consistent
    assert missing_pages(web) == []
    assert stats["acked"] == web.pages
    assert [n.finish_reason() for n in nodes] == ["finished", "finished"]
    assert JobCheck(JobStore(make_client(redis_server.url), "site", "cli")).run() == []
