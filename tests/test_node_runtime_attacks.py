"""Attacks on the node's runtime: the hand-overs between the reactor and the node's Redis thread.

Each test tries to lose a page (or hang a node) at one seam of the thread design: a lease
answer that reaches the reactor after close began, the close Deferred against the flush, ops
that come after close, close while Redis is away, a bug in the Redis thread's loop, and a node
stopped hard by Ctrl-C twice in the middle of a crawl. The node's real Redis thread runs
against a real redis-server; the test thread stands for the reactor (unit/thread_harness.py),
except in the last test, which runs real `scrapy crawl` nodes.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from scrapy.settings import Settings
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.thread_api import Undelivered
from scrapy_clustersync.store import JobStore, Push, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import Ack, Release
from testkit.redis_server import RedisServer

from conftest import ProxyFactory, SiteFactory
from support import (
    marks,
    missing_pages,
    node_env,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    wait_all,
    wait_until,
)


def _node(server: RedisServer, pushes: int, url: str = "",
          **settings: str) -> tuple[JobStore, NodeThread]:
    """A node joined to ``job`` (through ``url``, if given) whose queue holds ``pushes`` entries
    (not started yet)."""
    url = url or server.url
    config = ClusterConfig.from_settings(Settings({"CLUSTERSYNC_REDIS_URL": url, **settings}),
                                         "job")
    store = JobStore(make_client(url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000)[0]
    if pushes:
        store.flush(epoch, [Push(bytes([i]) * 20, 0, b"entry") for i in range(pushes)],
                    new_call_id())
    return store, NodeThread(store, config, epoch)


def _wait_leased(store: JobStore, count: int) -> None:
    wait_until(lambda: store.status().leased == count, 10, f"{count} entries leased")


def test_a_lease_answer_that_reaches_the_reactor_after_close_began_goes_back_to_the_queue(
    redis_server: RedisServer,
) -> None:
    # given a node whose lease call came back while the reactor had not run its answer yet
    store, node = _node(redis_server, 5)
    node.start()
    _wait_leased(store, 5)
    # when the node closes before the reactor runs that answer (then runs it)
    undelivered = node.close(unacked=[])
    # then the reactor hands nothing out, and every entry is back in the queue at once
    assert node.link.waiting == 0 and node.link.take() is None
    assert not undelivered
    status = store.status()
    assert (status.queued, status.leased) == (5, 0)


def test_the_close_deferred_fires_only_once_every_write_is_in_redis(
    redis_server: RedisServer,
) -> None:
    # given a node that buffered 300 pushes an instant before it closes
    store, node = _node(redis_server, 0, CLUSTERSYNC_BATCH_SIZE="50")
    node.start()
    for i in range(300):
        node.submit(Push(i.to_bytes(20, "big"), 0, b"entry"))
    # when it closes: what Redis holds is read in the Deferred's callback, on the "reactor"
    seen: list[int] = []
    closed = node.link.close([])
    closed.addCallback(lambda _: seen.append(store.status().queued))
    node.wait_for(lambda _: bool(seen), 60)
    # then every push was in Redis before the Deferred fired
    assert seen == [300]


def test_an_ack_that_comes_after_close_began_never_loses_its_request(
    redis_server: RedisServer,
) -> None:
    # given a node that handed one leased entry to the engine, still under way at close
    store, node = _node(redis_server, 3)
    node.start()
    node.wait_for(lambda link: link.waiting == 3, 10)
    taken = node.take()
    assert taken is not None
    entry_id = taken[0]
    # when the node closes with it unacked, and its callback's child and ack come after
    closed = node.link.close([entry_id])
    node.submit(Push(b"\xff" * 20, 0, b"child"))
    node.submit(Ack(entry_id))
    left: list[Undelivered] = []
    closed.addCallback(left.append)
    node.wait_for(lambda _: bool(left), 60)
    # then the entry is back in the queue (crawled again elsewhere), never acked without its
    # child: the late ops are not applied, and nothing is leased any more
    status = store.status()
    assert (status.queued, status.leased) == (3, 0)


def test_close_while_redis_is_away_hands_back_every_write_and_release(
    redis_server: RedisServer,
) -> None:
    # given a node holding three leases (one under way), and a push buffered while Redis is away
    store, node = _node(redis_server, 3, CLUSTERSYNC_SOCKET_TIMEOUT="1")
    node.start()
    node.wait_for(lambda link: link.waiting == 3, 10)
    taken = node.take()
    assert taken is not None
    redis_server.stop()
    node.submit(Push(b"\xee" * 20, 0, b"child"))
    # when the node closes (the close may take CLOSE_TIMEOUT_S to give up on Redis)
    began = time.monotonic()
    undelivered = node.close([taken[0]], timeout_s=40)
    # then what it could not send comes back whole: the push and a release of every lease
    assert time.monotonic() - began < 30
    ops = [*(undelivered.pending[1] if undelivered.pending else ()), *undelivered.ops]
    released = {op.entry_id for op in ops if isinstance(op, Release)}
    assert len(released) == 3
    assert any(isinstance(op, Push) and op.fingerprint == b"\xee" * 20 for op in ops)


def test_a_bug_in_the_redis_threads_loop_does_not_leave_the_close_deferred_unfired(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a node whose Redis thread hits an unexpected error once, outside any Redis call
    store, node = _node(redis_server, 0)
    tell = node.worker._tell
    failed: list[bool] = []

    def tell_failing_once() -> None:
        if not failed:
            failed.append(True)
            raise RuntimeError("a bug in the loop")
        tell()

    monkeypatch.setattr(node.worker, "_tell", tell_failing_once)
    node.start()
    wait_until(lambda: bool(failed), 10, "the error")
    node.submit(Push(b"\x01" * 20, 0, b"entry"))
    # when the node closes
    undelivered = node.close([], timeout_s=30)
    # then the close still fires, with the push in Redis: the node neither hangs nor loses it
    assert not undelivered
    assert store.status().queued == 1


def test_a_node_stopped_by_ctrl_c_twice_mid_crawl_loses_no_page(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two nodes crawling a slow site
    web = site(200, delay_s=0.05)
    settings = {"CONCURRENT_REQUESTS": "4", "CLUSTERSYNC_PREFETCH": "8"}
    first = start_node("node1", redis_server.url, web.start_url, tmp_path, settings)
    second = start_node("node2", redis_server.url, web.start_url, tmp_path, settings)
    wait_until(lambda: sum(web.hits_by_agent().get("node1", {}).values()) >= 15, 60,
               "node1 to fetch 15 pages")
    # when the first is stopped hard: Ctrl-C, then Ctrl-C again before it closed
    first.process.send_signal(signal.SIGINT)
    time.sleep(0.2)
    first.process.send_signal(signal.SIGINT)
    first.wait(30)
    # then the other fetches every page the first held, with nothing lost
    wait_all([second], 120)
    assert missing_pages(web) == [], second.log()[-3000:]
    assert len(web.hits()) == 200
    # what the first held (8 prefetched, 4 under way, acks not yet sent) may be fetched twice
    # (at-least-once), not the site again
    assert len(pages_fetched_twice(web)) <= 40, pages_fetched_twice(web)


def test_a_pause_racing_a_lease_in_flight_holds_within_a_second_and_leases_no_more(
    redis_server: RedisServer,
) -> None:
    # given a node whose reactor just took its whole prefetch, so the thread leases again now
    store, node = _node(redis_server, 40, CLUSTERSYNC_PREFETCH="4")
    node.start()
    node.wait_for(lambda link: link.waiting == 4, 10)
    for _ in range(4):
        assert node.take() is not None
    # when the job is paused while that lease is on its way
    store.control.change("pause")
    # then the reactor learns it within a second, and no lease is made after it did
    assert node.wait_for(lambda link: not link.allows_downloads, 5) < 1.0
    leased = store.status().leased
    time.sleep(1.0)
    node.pump()
    assert store.status().leased == leased <= 8
    node.close([])


def test_ctrl_c_while_the_node_still_joins_holds_no_other_node_up(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path,
) -> None:
    # given a node whose join takes seconds (every answer from Redis comes 0.7 s late)
    proxy = proxy_factory(redis_server, delay_s=0.7)
    web = site(30)
    first = start_node("node1", proxy.url(), web.start_url, tmp_path,
                       {"CLUSTERSYNC_SOCKET_TIMEOUT": "5"})
    store = JobStore(make_client(redis_server.url), "site", "observer")
    wait_until(lambda: store.status().exists, 30, "the join to reach Redis")
    # when it gets Ctrl-C before the join's answer reached it, and exits
    first.process.send_signal(signal.SIGINT)
    first.wait(60)
    # then a node started next runs the job's start() (taken over if the first held it) and
    # crawls every page: the first holds nobody up for ever
    second = start_node("node2", redis_server.url, web.start_url, tmp_path)
    wait_all([second], 90)
    assert missing_pages(web) == [], (store.status(), second.log()[-3000:])
    assert second.finish_reason() == "finished"


def test_a_node_closed_just_after_redis_came_back_sends_its_writes_instead_of_spooling_them(
    redis_server: RedisServer, proxy_factory: ProxyFactory,
) -> None:
    # given a node that saw Redis go away for a few seconds, with a lease and a push buffered
    proxy = proxy_factory(redis_server)
    store, node = _node(redis_server, 1, proxy.url(), CLUSTERSYNC_SOCKET_TIMEOUT="1")
    node.start()
    node.wait_for(lambda link: link.waiting == 1, 10)
    proxy.cut()
    node.submit(Push(b"\xee" * 20, 0, b"child"))
    node.wait_for(lambda link: link._view.away, 10)
    time.sleep(3)  # a few failed tries: the next one is seconds away
    # when Redis is back and the node closes before its next try
    proxy.restore()
    undelivered = node.close([], timeout_s=40)
    # then it sent everything to Redis: nothing is left for a spool that only a node started
    # in the same directory would replay (meanwhile its lease would hold the entry up)
    assert not undelivered, undelivered
    status = store.status()
    assert (status.queued, status.leased) == (2, 0)


def test_sigterm_while_redis_is_blackholed_exits_and_the_next_node_loses_nothing(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path,
) -> None:
    # given a node crawling through a proxy to Redis
    proxy = proxy_factory(redis_server)
    web = site(300, delay_s=0.01)
    first = start_node("first", proxy.url(), web.start_url, tmp_path,
                       {"CLUSTERSYNC_SOCKET_TIMEOUT": "2"})
    wait_until(lambda: pages_fetched(web) >= 40, 60, "40 pages")
    # when Redis stops answering (no error: every byte is dropped) and the node gets SIGTERM
    proxy.cut(blackhole=True)
    time.sleep(0.5)
    began = time.monotonic()
    first.process.terminate()
    # then it exits cleanly within its close timeout, keeping what it could not send
    assert first.wait(60) == 0, first.log()[-3000:]
    assert time.monotonic() - began < 40
    assert "writes are kept in" in first.log()
    # and the next node started in the same place sends them and crawls every page
    proxy.restore()
    second = start_node("second", redis_server.url, web.start_url, tmp_path)
    wait_all([second], timeout_s=120)
    assert missing_pages(web) == [], second.log()[-3000:]
    assert second.finish_reason() == "finished"


def test_a_node_whose_redis_never_answers_at_open_stops_with_a_reason_and_a_non_zero_exit(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path,
) -> None:
    # given a Redis that accepts connections but never answers (every byte dropped)
    proxy = proxy_factory(redis_server)
    proxy.cut(blackhole=True)
    web = site(5)
    # when a node starts on it
    node = start_node("node1", proxy.url(), web.start_url, tmp_path,
                      {"CLUSTERSYNC_SOCKET_TIMEOUT": "1"})
    # then it does not hang in open: it stops, says why, and exits non-zero
    assert node.wait(90) != 0, node.log()[-3000:]
    assert node.finish_reason() == "clustersync_redis_unreachable", node.log()[-3000:]
    assert pages_fetched(web) == 0


def test_sigterm_to_the_node_running_start_hands_start_over_and_every_page_is_fetched(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path,
) -> None:
    # given two nodes, one of them running a slow start() (60 requests, 0.2 s apart)
    web = site(60)
    settings = {"PAGES": "60", "START_SLEEP": "0.2"}
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=fault_project, spider="slowstart", env=node_env(tmp_path))
             for name in ("first", "second")]
    wait_until(lambda: all("clustersync: node" in node.log() for node in nodes), 90, "joins")
    [owner] = [node for node in nodes if "runs the spider's start()" in node.log()]
    [other] = [node for node in nodes if node is not owner]
    wait_until(lambda: sum(line.startswith(owner.name) for line in marks(tmp_path, "started"))
               >= 10, 60, "start() to be under way")
    # when the node running it gets SIGTERM half way through start()
    owner.process.terminate()
    assert owner.wait(60) == 0
    # then start() is not taken as done: the other runs it again, and every page is fetched
    wait_all([other], timeout_s=120)
    assert missing_pages(web) == [], other.log()[-3000:]
    assert other.finish_reason() == "finished"
