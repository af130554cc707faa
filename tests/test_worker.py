"""The node's Redis thread: what it hands back when the node closes."""

from __future__ import annotations

import time
from collections.abc import Callable

from scrapy.settings import Settings
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig, DedupSettings
from scrapy_clustersync.store import JobStore, Push, make_client
from scrapy_clustersync.store.bloom_layout import BloomParams, layer
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.keys import JobKeys
from testkit.redis_server import RedisServer


def test_close_hands_back_what_a_lease_call_with_a_lost_answer_took(
    redis_server: RedisServer,
) -> None:
    # given a node whose lease call ran in Redis but whose answer never arrived
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000)[0]
    ops = [Push(bytes([i]) * 20, 0, b"entry") for i in range(5)]
    store.flush(epoch, ops, new_call_id())
    worker = NodeThread(store, config, epoch)
    lost_call = new_call_id()
    store.lease(epoch, 5, 60_000, lost_call)
    worker.worker._pending_lease = (lost_call, 5, 0)
    worker.worker._next_lease = float("inf")  # the thread does not retry it before the node closes
    # when the node closes
    worker.start()
    undelivered = worker.close(unacked=[])
    # then those leases are back in the queue at once, not after the 60 s lease timeout
    status = store.status()
    assert not undelivered
    assert (status.queued, status.leased) == (5, 0)


def test_the_worker_allocates_the_next_bloom_layer_before_a_batch_needs_it(
    redis_server: RedisServer, filter_from_first_url: None,
) -> None:
    # given a node of a job whose first Bloom layer (capacity 10,000) is 95% full
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url}), "job")
    dedup = DedupSettings("bloom", 10_000, 0.001)
    store = JobStore(make_client(redis_server.url), "job", config.node_id, dedup)
    epoch = store.join(ttl_ms=60_000)[0]
    store.flush(epoch, [Push(bytes([1]) * 20, 0, b"entry")], new_call_id())
    store.client.hset(JobKeys("job").bloom, "count0", 9_500)
    worker = NodeThread(store, config, epoch)
    # when its Redis thread flushes one more push (and so learns how full the layer is)
    worker.submit(Push(bytes([2]) * 20, 0, b"entry"))
    worker.start()
    # then it allocates the second layer on its own, though no batch needs it yet
    second = layer(BloomParams(10_000, 0.001), 1)
    deadline = time.monotonic() + 10
    while store.status().dedup["prepared_bytes"] < second.bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.close(unacked=[])
    assert store.status().dedup["prepared_bytes"] == second.bytes


def _lone_node(redis_server: RedisServer, **settings: str) -> tuple[NodeThread, JobStore]:
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url, **settings}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000, claim=False)[0]  # start() ran elsewhere and is over
    return NodeThread(store, config, epoch), store


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> float:
    """Wait until ``condition`` holds; returns how long it took."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout_s, "timed out"
        time.sleep(0.01)
    return time.monotonic() - began


def test_a_node_that_turns_idle_learns_the_job_is_finished_within_the_idle_wait(
    redis_server: RedisServer,
) -> None:
    # given a lone node of an empty job, heartbeats 2 s apart and an idle wait of 0.3 s
    worker, _ = _lone_node(redis_server, CLUSTERSYNC_HEARTBEAT_INTERVAL="2",
                           CLUSTERSYNC_LEASE_TIMEOUT="60", CLUSTERSYNC_IDLE_CLOSE_AFTER="0.3")
    worker.start()
    time.sleep(0.2)  # its first heartbeat, busy, went out
    # when its engine turns idle
    worker.link.mark_idle()
    # then it says so at once and asks again when the idle wait is over, not a heartbeat later
    took_s = worker.wait_for(lambda link: link.outcome == "finished", 5)
    worker.close(unacked=[])
    assert 0.25 <= took_s < 1.0


def test_a_request_scheduled_after_the_job_was_found_finished_is_crawled_not_dropped(
    redis_server: RedisServer,
) -> None:
    # given a lone idle node told by its heartbeat that the job is finished
    worker, store = _lone_node(redis_server, CLUSTERSYNC_HEARTBEAT_INTERVAL="0.1",
                               CLUSTERSYNC_LEASE_TIMEOUT="60", CLUSTERSYNC_IDLE_CLOSE_AFTER="0.1")
    worker.start()
    worker.link.mark_idle()
    worker.wait_for(lambda link: link.outcome == "finished", 5)
    # when a spider_idle handler schedules a request (the reactor buffers a push)
    worker.submit(Push(bytes([7]) * 20, 0, b"entry"))
    worker.link.mark_busy()
    # then the node no longer says finished, and the request comes back to it to crawl
    assert worker.link.outcome is None
    worker.wait_for(lambda link: link.waiting == 1, 5)
    assert worker.link.outcome is None
    entry = worker.take()
    worker.close(unacked=[entry[0]] if entry else [])
    assert entry is not None and entry[1] == b"entry"


def test_a_higher_priority_push_is_handed_out_before_entries_leased_ahead_of_it(
    redis_server: RedisServer,
) -> None:
    # given a node that leased two entries of priority 0 ahead of need
    worker, store = _lone_node(redis_server, CLUSTERSYNC_PREFETCH="4")
    epoch = worker.worker.epoch
    store.flush(epoch, [Push(bytes([i]) * 20, 0, f"low {i}".encode()) for i in (1, 2)],
                new_call_id())
    worker.start()
    worker.wait_for(lambda link: link.waiting == 2, 5)
    # when the node pushes a request of priority 5 and the engine asks for work
    worker.submit(Push(bytes([9]) * 20, 5, b"high"))
    first = worker.take()
    worker.link.want_lease()
    worker.wait_for(lambda link: not link.pushes_unleased and link.waiting >= 1, 5)
    taken: list[tuple[str, bytes]] = []
    while (entry := worker.take()) is not None:
        taken.append(entry)
    # then the high-priority request comes first, as in a single Scrapy process, and the
    # entries leased ahead of it follow, handed back and leased again, none lost
    assert first is None
    assert [blob for _, blob in taken] == [b"high", b"low 1", b"low 2"]
    assert worker.link.totals()["outranked"] == 2
    worker.close(unacked=[entry_id for entry_id, _ in taken])
