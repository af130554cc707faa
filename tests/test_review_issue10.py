"""Adversarial review of issue 10 (dead nodes, job control, tasks, check --repair, cluster stats).

Each test attacks one promise of docs/guarantees.md or docs/architecture.md with a real
redis-server (and real `scrapy crawl` nodes where the race needs them) and asserts what a user
cares about: no page lost, none crawled by two live nodes, no node declared dead for an outage,
a node that never wedges.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scrapy.settings import Settings
from test_guarantees import SPIDERS
from test_node_failover import FAILOVER, beat
from test_store import joined, push_op
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.plugin.stats_sender import StatsSender
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.consistency import JobCheck
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.records import as_text
from testkit.redis_server import RedisServer

from conftest import ProxyFactory, SiteFactory
from support import (
    marks,
    missing_pages,
    node_env,
    pages_fetched,
    pages_fetched_twice,
    project_with_spiders,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

#: what the worker sends as the outage grace: the reconnect backoff (5 s) plus one heartbeat
GRACE_MS = 5_000 + 333

ISSUE10_SPIDERS = SPIDERS + '''

    class SurrogateErrorSpider(SiteSpider):
        """Page 3's callback raises with text decoded from a JSON API (a lone surrogate: an
        emoji cut in half), as user code does."""

        name = "surrogate"

        def parse(self, response):
            yield from super().parse(response)
            if response.url.endswith("/page/3.html"):
                raise ValueError("no product named " + chr(0xD83D))
'''


#: what the worker passes as the gap that earns the grace: two heartbeat intervals (1/3 s here)
GAP_MS = 666

def stall_redis(server: RedisServer, seconds: float) -> None:
    """Freeze the redis-server process (a stall: a fork, a slow command, a VM pause)."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def lease_owners(client: Any, job: str) -> dict[str, str]:
    return {as_text(i): as_text(v).split("|", 1)[1]
            for i, v in client.hgetall(f"clustersync:{{{job}}}:leased").items()}


def clustersync(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url", url,
                           *args], capture_output=True, text=True, timeout=60, check=False)


# ---- 1. the outage guard ------------------------------------------------------------------------

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
    # when Redis stops answering eight times for 0.75 s (less than the dead-after), 2.5 s
    # apart (a stall, a failover): calls hang, fail when it is back, and are retried
    for _ in range(8):
        proxy.cut(blackhole=True)
        time.sleep(0.75)
        proxy.restore()
        time.sleep(2.5)
    declared = int(client.hget("clustersync:{site}:stats", "declared_dead") or 0)
    told = sum(node.log().count("was declared dead by node") for node in nodes)
    print(f"after 8 Redis outages of 0.75s (dead-after 1.5s): {declared} nodes declared dead, "
          f"{told} told so; {pages_fetched(web)} pages fetched so far")
    wait_all(nodes, timeout_s=90)
    # then no node was declared dead for them, and no page is lost
    assert missing_pages(web) == []
    assert (declared, told) == (0, 0)


# ---- 2. check --repair -------------------------------------------------------------------------

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


# ---- 3. a node back from the dead -------------------------------------------------------------

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
    worker._turn(time.monotonic())  # the control state, the first heartbeat, a lease of 8
    node.pump()
    assert node.link.waiting == 8
    # when it stands still past its dead-after, node b declares it dead (its 8 leases go back
    # to the queue), and then its Redis thread runs on
    time.sleep(0.7)
    assert beat(other, epoch).declared_dead == ((config.node_id, 8),)
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


# ---- 4. failed records Redis cannot take -------------------------------------

def test_a_failed_request_whose_error_text_holds_a_lone_surrogate_does_not_wedge_the_node(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a spider whose callback for page 3 raises an error with text from a JSON API that
    # holds half an emoji (a lone surrogate, which UTF-8 cannot encode)
    web = site(30)
    project = project_with_spiders(tmp_path, "issue10", ISSUE10_SPIDERS)
    # when a node crawls the site
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, {},
                      project_dir=project, spider="surrogate", env=node_env(tmp_path))
    # then it finishes with every page, and the failure is recorded
    wait_all([node], timeout_s=40)
    failed = redis_server.client().lrange("clustersync:{surrogate}:failed", 0, -1)
    print(f"finish reason {node.finish_reason()}, failed records {len(failed)}")
    assert missing_pages(web) == []
    assert node.finish_reason() == "finished"
    assert len(failed) == 1 and "ValueError" in as_text(failed[0])


# ---- 5. cluster stats ------------------------------------------------------------------------

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


# ---- 6. spool files and the previous version --------------------------------------------------

# ---- 7. chaos: random freezes -----------------------------------------------------------------

def test_random_freezes_of_two_nodes_lose_no_page_and_count_each_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow site (heartbeat 0.5 s, dead-after 1.5 s)
    seed = int(os.environ.get("REVIEW_SEED", time.time()))
    rng = random.Random(seed)
    web = site(500, delay_s=0.1)
    client = redis_server.client()
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {**FAILOVER, "CLUSTERSYNC_BATCH_SIZE": "3"})
    wait_until(lambda: pages_fetched(web) >= 30, 60, "30 pages")
    # when, for 18 s, a node picked at random is frozen (SIGSTOP) for 0.3 to 3 s at a time
    freezes = []
    until = time.monotonic() + 18
    while time.monotonic() < until and all(n.process.poll() is None for n in nodes):
        victim = rng.choice(nodes)
        frozen_s = rng.uniform(0.3, 3.0)
        victim.process.send_signal(signal.SIGSTOP)
        time.sleep(frozen_s)
        victim.process.send_signal(signal.SIGCONT)
        freezes.append((victim.name, round(frozen_s, 2)))
        time.sleep(rng.uniform(0.2, 1.5))
    wait_all(nodes, timeout_s=90)
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


# ---- 8. job control during start() ------------------------------------------------------------

def test_pause_and_stop_during_start_then_resume_and_a_new_run_fetch_every_page_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node running a slow start() (60 requests, 0.05 s apart)
    web = site(60)
    project = project_with_spiders(tmp_path, "issue10", ISSUE10_SPIDERS)
    settings = {"PAGES": "60", "START_SLEEP": "0.05"}

    def node(name: str) -> Any:
        return start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                          project_dir=project, spider="slowstart", env=node_env(tmp_path))

    first = node("first")
    wait_until(lambda: len(marks(tmp_path, "started")) >= 10, 60, "start() to be under way")
    # when the job is paused during start(), then stopped, then resumed, and a new node runs
    assert clustersync(redis_server.url, "pause", "slowstart").returncode == 0
    time.sleep(1.0)
    assert clustersync(redis_server.url, "stop", "slowstart").returncode == 0
    first.wait(40)
    assert first.finish_reason() == "clustersync_stopped"
    fetched_in_first = pages_fetched(web)
    assert clustersync(redis_server.url, "resume", "slowstart").returncode == 0
    second = node("second")
    wait_all([second], timeout_s=60)
    # then the two runs fetched every page exactly once
    print(f"first run fetched {fetched_in_first}, start() marks {len(marks(tmp_path, 'started'))}"
          f", twice: {pages_fetched_twice(web)}")
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}
    assert second.finish_reason() == "finished"

