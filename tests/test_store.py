"""The job's Redis scripts against a real redis-server: order, dedup, leases, retries."""

from __future__ import annotations

import time

import pytest
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.plugin.request_tasks import site_of
from scrapy_clustersync.store import (
    Ack,
    DeadLetterEntry,
    JobStore,
    Push,
    PushFlags,
    StartDone,
    StateLost,
    make_client,
)
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()


def push_op(url: str, priority: int = 0, dont_filter: bool = False) -> Push:
    request = Request(url, priority=priority, dont_filter=dont_filter)
    fingerprint = b"" if dont_filter else FINGERPRINTER.fingerprint(request)
    return Push(fingerprint, priority, CODEC.encode(request), dont_filter, site_of(request))


def joined(redis_server: RedisServer, node: str = "n1", job: str = "job") -> tuple[JobStore, str]:
    store = JobStore(make_client(redis_server.url), job, node)
    epoch, _ = store.join(ttl_ms=10_000)
    return store, epoch


def lease_urls(store: JobStore, epoch: str, count: int = 100, lease_ms: int = 10_000) -> list[str]:
    leased = store.lease(epoch, count, lease_ms, new_call_id())
    return [CODEC.decode(blob).url for _, blob, _ in leased]


def test_within_a_priority_the_order_is_scrapys_lifo_or_fifo_others_before_start_requests(
    redis_server: RedisServer,
) -> None:
    # given pushes of one priority, as a node of default Scrapy settings makes them: other
    # requests LIFO, start requests FIFO; and one push of a higher priority
    store, epoch = joined(redis_server)
    lifo, start = PushFlags.LIFO, PushFlags.START
    ops = [flagged("http://a/start1", start), flagged("http://a/child1", lifo),
           flagged("http://a/start2", start), flagged("http://a/child2", lifo),
           flagged("http://a/high", lifo, priority=1), flagged("http://a/fifo", PushFlags(0))]
    store.flush(epoch, ops, new_call_id())
    # then the queue gives the higher priority first, then the others newest first, then the
    # start requests oldest first, as Scrapy's scheduler does (a FIFO push, from a node of other
    # settings, comes after the LIFO ones of its priority and kind)
    assert lease_urls(store, epoch) == [
        "http://a/high", "http://a/child2", "http://a/child1", "http://a/fifo",
        "http://a/start1", "http://a/start2"]


def flagged(url: str, flags: PushFlags, priority: int = 0) -> Push:
    request = Request(url, priority=priority)
    return Push(FINGERPRINTER.fingerprint(request), priority, CODEC.encode(request), flags,
                site_of(request))


def test_higher_priority_first_and_fifo_among_equals(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server)
    ops = [push_op("http://a/1"), push_op("http://a/2", priority=5), push_op("http://a/3"),
           push_op("http://a/4", priority=-3), push_op("http://a/5", priority=5)]
    store.flush(epoch, ops, new_call_id())
    assert lease_urls(store, epoch) == [
        "http://a/2", "http://a/5", "http://a/1", "http://a/3", "http://a/4"]


def test_duplicates_are_filtered_but_dont_filter_requests_are_never_merged(
    redis_server: RedisServer,
) -> None:
    store, epoch = joined(redis_server)
    result = store.flush(epoch, [push_op("http://a/x"), push_op("http://a/x"),
                                 push_op("http://a/y", dont_filter=True),
                                 push_op("http://a/y", dont_filter=True)], new_call_id())
    assert (result.pushed, result.filtered) == (3, 1)
    assert sorted(lease_urls(store, epoch)) == ["http://a/x", "http://a/y", "http://a/y"]


def test_a_retried_flush_changes_nothing_more(redis_server: RedisServer) -> None:
    # given a flush that ran but whose answer was lost (redis-py retries with the same call id)
    store, epoch = joined(redis_server)
    call_id = new_call_id()
    ops = [push_op("http://a/1", dont_filter=True), push_op("http://a/2")]
    first = store.flush(epoch, ops, call_id)
    # when it runs again
    again = store.flush(epoch, ops, call_id)
    # then the same result comes back and nothing was queued twice
    assert first == again
    assert sorted(lease_urls(store, epoch)) == ["http://a/1", "http://a/2"]


def test_a_retried_lease_hands_out_the_same_entries(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server)
    store.flush(epoch, [push_op(f"http://a/{i}") for i in range(6)], new_call_id())
    call_id = new_call_id()
    first = store.lease(epoch, 3, 10_000, call_id)
    again = store.lease(epoch, 3, 10_000, call_id)
    assert first == again
    assert len(lease_urls(store, epoch)) == 3  # the other three are still queued


def test_an_expired_lease_returns_to_the_queue_and_skips_dedup(redis_server: RedisServer) -> None:
    # given node n1 leased a request and died (its lease is not renewed)
    dead, epoch = joined(redis_server, "n1")
    dead.flush(epoch, [push_op("http://a/held")], new_call_id())
    assert lease_urls(dead, epoch, lease_ms=100) == ["http://a/held"]
    time.sleep(0.2)
    # when another node leases
    alive, _ = joined(redis_server, "n2")
    # then the expired request is handed out again, although its fingerprint is "seen"
    assert lease_urls(alive, epoch) == ["http://a/held"]
    assert alive.status().counters["reclaimed"] == 1


def test_a_late_ack_of_a_reclaimed_request_removes_it_from_the_queue(
    redis_server: RedisServer,
) -> None:
    store, epoch = joined(redis_server)
    store.flush(epoch, [push_op("http://a/slow")], new_call_id())
    [(entry_id, _, _)] = store.lease(epoch, 1, 100, new_call_id())
    time.sleep(0.2)
    store.lease(epoch, 0, 100, new_call_id())  # reclaims the expired lease into the queue
    assert store.status().queued == 1
    store.flush(epoch, [Ack(entry_id)], new_call_id())
    status = store.status()
    assert (status.queued, status.leased, status.counters["acked"]) == (0, 0, 1)


def test_heartbeat_renews_leases_of_a_live_node(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [push_op("http://a/1")], new_call_id())
    [(entry_id, _, _)] = store.lease(epoch, 1, 300, new_call_id())
    for _ in range(4):
        time.sleep(0.15)
        store.heartbeat(epoch, ttl_ms=10_000, lease_ms=300, info={}, idle=False,
                        idle_after_ms=1000, lease_ids=[entry_id])
    other, _ = joined(redis_server, "n2")
    assert lease_urls(other, epoch) == []  # still leased to n1 after 600 ms > 300 ms


def test_undecodable_entry_goes_to_dead_letters_with_its_reason(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server)
    store.flush(epoch, [push_op("http://a/1")], new_call_id())
    [(entry_id, blob, _)] = store.lease(epoch, 1, 10_000, new_call_id())
    store.flush(epoch, [DeadLetterEntry(entry_id, "not a msgpack envelope")], new_call_id())
    [letter] = store.dead_letters()
    assert (letter.entry_id, letter.reason, letter.entry) == (entry_id, "not a msgpack envelope",
                                                             blob)
    assert store.status().leased == 0


def test_exactly_one_node_claims_start_and_a_dead_claimer_is_taken_over(
    redis_server: RedisServer,
) -> None:
    client = make_client(redis_server.url)
    first, second = JobStore(client, "job", "n1"), JobStore(client, "job", "n2")
    assert first.join(ttl_ms=200)[1] is True
    assert second.join(ttl_ms=10_000)[1] is False
    time.sleep(0.3)  # n1 stops heart-beating: its start() may be unfinished
    assert second.join(ttl_ms=10_000)[1] is True
    epoch = second.ensure_job()
    second.flush(epoch, [StartDone()], new_call_id())
    assert JobStore(client, "job", "n3").join(ttl_ms=10_000)[1] is False


def test_the_job_finishes_only_when_every_live_node_was_idle_long_enough(
    redis_server: RedisServer,
) -> None:
    a, epoch = joined(redis_server, "a")  # a runs start() ...
    b, _ = joined(redis_server, "b")
    a.flush(epoch, [StartDone()], new_call_id())  # ... and has exhausted it

    def beat(store: JobStore, idle: bool) -> bool:
        return store.heartbeat(epoch, ttl_ms=10_000, lease_ms=1000, info={}, idle=idle,
                               idle_after_ms=200, lease_ids=[]).finished

    assert beat(a, True) is False
    assert beat(b, False) is False
    assert beat(b, True) is False
    time.sleep(0.25)
    assert beat(a, True) is True


def test_scripts_refuse_to_run_on_a_job_that_vanished(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server)
    assert store.purge() > 0
    with pytest.raises(StateLost):
        store.flush(epoch, [push_op("http://a/1")], new_call_id())
    with pytest.raises(StateLost):
        store.lease(epoch, 1, 1000, new_call_id())


def test_jobs_on_one_redis_do_not_touch_each_other(redis_server: RedisServer) -> None:
    one, epoch_one = joined(redis_server, job="one")
    two, epoch_two = joined(redis_server, job="two")
    one.flush(epoch_one, [push_op("http://a/1")], new_call_id())
    assert lease_urls(two, epoch_two) == []
    two.purge()
    assert lease_urls(one, epoch_one) == ["http://a/1"]


def test_a_heartbeat_says_how_long_until_the_job_is_finished_if_nothing_changes(
    redis_server: RedisServer,
) -> None:
    a, epoch = joined(redis_server, "a")
    a.flush(epoch, [StartDone()], new_call_id())

    def beat(idle: bool) -> int:
        return a.heartbeat(epoch, ttl_ms=10_000, lease_ms=1000, info={}, idle=idle,
                           idle_after_ms=500, lease_ids=[]).finish_wait_ms

    # a busy node: waiting does not finish the job
    assert beat(False) == -1
    # a node idle just now: finished in the rest of the idle wait
    assert 400 <= beat(True) <= 500
    time.sleep(0.55)
    assert beat(True) == 0
