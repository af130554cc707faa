"""A node's calls sent together in one round trip (store/round_trip.py), against a real
redis-server: Redis runs them in the order they were added, each is answered as it would be
alone, and together they cost one round trip."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TypeVar

import pytest
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter
from unit.thread_harness import NodeThread

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import ClusterConfig, DedupSettings
from scrapy_clustersync.store import Ack, JobStore, Leased, Push, StoreUnavailable, make_client
from scrapy_clustersync.store.errors import BadBatch
from scrapy_clustersync.store.heartbeat_script import Beat
from scrapy_clustersync.store.job_store import beat_of, new_call_id
from scrapy_clustersync.store.records import as_text
from scrapy_clustersync.store.round_trip import Answer, RoundTrip
from testkit.redis_server import RedisServer

from conftest import ProxyFactory

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()
LEASE_MS = 60_000


def push(url: str, fingerprint: bytes | None = None) -> Push:
    request = Request(url)
    return Push(fingerprint or FINGERPRINTER.fingerprint(request), 0, CODEC.encode(request))


def joined(url: str, dedup: DedupSettings | None = None) -> tuple[JobStore, str]:
    store = JobStore(make_client(url), "job", "n1", dedup)
    epoch, _ = store.join(ttl_ms=LEASE_MS)
    return store, epoch


def a_beat() -> Beat:
    return beat_of(ttl_ms=LEASE_MS, lease_ms=LEASE_MS, info={}, idle=False, idle_after_ms=1000,
                   lease_ids=[])


def urls(leased: Sequence[Leased]) -> set[str]:
    return {CODEC.decode(entry.blob).url for entry in leased}


@pytest.mark.timing
def test_a_flush_a_lease_a_heartbeat_and_a_control_read_cost_one_round_trip_in_order(
    redis_server: RedisServer, proxy_factory: ProxyFactory
) -> None:
    # given a node that reaches Redis at 0.1 s each way, whose scripts ran once
    far = proxy_factory(redis_server, delay_s=0.1)
    store, epoch = joined(far.url())
    store.lease(epoch, 1, LEASE_MS, new_call_id())
    # when a batch of three pushes, a lease, a heartbeat and a control read go in one round trip
    trip = store.round_trip()
    flushed = store.flush_in(trip, epoch, [push(f"http://a/{i}") for i in range(3)], new_call_id())
    leased = store.lease_in(trip, epoch, 10, LEASE_MS, new_call_id())
    beat = store.heartbeat_in(trip, epoch, a_beat())
    control = store.control.read_in(trip)
    began = time.monotonic()
    trip.send()
    took_s = time.monotonic() - began
    # then the lease found the batch's pushes queued, every call was answered, and together
    # they took one round trip (0.2 s; one after the other, four would take 0.8 s)
    print(f"\nfour calls in one round trip: {took_s:.3f}s at 0.2 s per round trip")
    assert flushed.result().pushed == 3
    assert urls(leased.result()) == {"http://a/0", "http://a/1", "http://a/2"}
    assert beat.result().live_nodes == 1
    assert control.result().state == "running"
    assert took_s < 0.4


def test_a_batch_redis_refuses_in_a_round_trip_leaves_the_other_calls_answered(
    redis_server: RedisServer,
) -> None:
    # given a job with one request queued
    store, epoch = joined(redis_server.url)
    store.flush(epoch, [push("http://a/queued")], new_call_id())
    # when a batch with a malformed push (an 8-byte fingerprint) and a lease go in one round trip
    trip = store.round_trip()
    batch = [push("http://a/good"), push("http://a/bad", b"\x07" * 8)]
    refused = store.flush_in(trip, epoch, batch, new_call_id())
    leased = store.lease_in(trip, epoch, 10, LEASE_MS, new_call_id())
    trip.send()
    # then the batch is refused whole, and the lease that came after it was made all the same
    with pytest.raises(BadBatch, match="fingerprint of 8 bytes"):
        refused.result()
    assert urls(leased.result()) == {"http://a/queued"}
    assert store.status().counters.get("pushed") == 1


def test_a_batch_that_cannot_be_encoded_is_refused_before_its_round_trip_and_the_rest_goes(
    redis_server: RedisServer,
) -> None:
    # given a job with one request queued, and a push whose priority Redis takes no string of
    store, epoch = joined(redis_server.url)
    store.flush(epoch, [push("http://a/queued")], new_call_id())
    request = Request("http://a/bool")
    unsendable = Push(FINGERPRINTER.fingerprint(request), True, CODEC.encode(request))
    # when it is added to a round trip with a lease and a control read
    trip = store.round_trip()
    # then the batch alone is refused, at once: nothing of it goes to Redis
    with pytest.raises(BadBatch, match="a bool value cannot be sent"):
        store.flush_in(trip, epoch, [unsendable], new_call_id())
    leased = store.lease_in(trip, epoch, 10, LEASE_MS, new_call_id())
    control = store.control.read_in(trip)
    trip.send()
    # and the calls after it were sent and answered
    assert urls(leased.result()) == {"http://a/queued"}
    assert control.result().state == "running"


def test_calls_of_a_round_trip_redis_forgot_the_scripts_of_are_sent_again_on_their_own(
    redis_server: RedisServer,
) -> None:
    # given a node whose scripts ran once, and a Redis that then forgot them (as a restart does)
    store, epoch = joined(redis_server.url)
    store.flush(epoch, [push("http://a/first")], new_call_id())
    store.lease(epoch, 1, LEASE_MS, new_call_id())
    redis_server.client().script_flush()
    # when a batch and a lease go in one round trip
    trip = store.round_trip()
    flushed = store.flush_in(trip, epoch, [push("http://a/1"), push("http://a/2")], new_call_id())
    leased = store.lease_in(trip, epoch, 10, LEASE_MS, new_call_id())
    trip.send()
    # then each was sent again on its own, in order, and answered as it would have been
    assert flushed.result().pushed == 2
    assert urls(leased.result()) == {"http://a/1", "http://a/2"}
    assert flushed.late and leased.late


def test_a_batch_that_needs_a_bloom_layer_not_yet_allocated_is_applied_from_a_round_trip(
    redis_server: RedisServer,
) -> None:
    # given a Bloom job whose first layer holds 20 fingerprints
    store, epoch = joined(redis_server.url, DedupSettings("bloom", 20, 0.01))
    store.flush(epoch, [push(f"http://a/old{i}") for i in range(15)], new_call_id())
    # when a batch of 30 new requests, which needs the next layer, goes in a round trip
    trip = store.round_trip()
    flushed = store.flush_in(trip, epoch, [push(f"http://a/{i}") for i in range(30)],
                             new_call_id())
    trip.send()
    # then it is applied whole: the layer was allocated and the batch sent again on its own
    assert flushed.result().pushed == 30
    assert flushed.late
    assert len(store.lease(epoch, 100, LEASE_MS, new_call_id())) == 45


def test_an_empty_round_trip_sends_nothing(redis_server: RedisServer) -> None:
    store, _ = joined(redis_server.url)
    client = redis_server.client()
    before = client.info("stats")["total_commands_processed"]
    trip: RoundTrip = store.round_trip()
    trip.send()
    # (the INFO itself is one command)
    assert client.info("stats")["total_commands_processed"] == before + 1


def test_a_lease_in_the_round_trip_that_tells_a_node_it_was_declared_dead_is_not_crawled_twice(
    redis_server: RedisServer,
) -> None:
    # given a node (8 prefetched) whose engine took the 8 entries it leased
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": redis_server.url, "CLUSTERSYNC_PREFETCH": "8",
        "CLUSTERSYNC_HEARTBEAT_INTERVAL": "0.2", "CLUSTERSYNC_NODE_DEAD_AFTER": "0.5",
        "CLUSTERSYNC_LEASE_TIMEOUT": "30"}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch, _ = store.join(ttl_ms=500, claim=False)
    other = JobStore(make_client(redis_server.url), "job", "b")
    other.join(ttl_ms=LEASE_MS, claim=False)
    other.flush(epoch, [push(f"http://a/{i}") for i in range(16)], new_call_id())
    node = NodeThread(store, config, epoch)  # its Redis thread's turns run here, by hand
    worker = node.worker
    worker._follow(time.monotonic())  # as its join does: the control state first
    worker._turn(time.monotonic())  # the first heartbeat and a lease of 8
    taken = [node.take() for _ in range(8)]
    assert None not in taken
    worker._receive(time.monotonic())
    # when it stands still past its dead-after, node b declares it dead (its 8 leases go back
    # to the queue), and then its Redis thread runs on: its next round trip holds the heartbeat
    # that tells it so and the lease its empty prefetch asks for
    time.sleep(0.7)
    assert [d.node for d in other.heartbeat(
        epoch, ttl_ms=LEASE_MS, lease_ms=LEASE_MS, info={}, idle=False, idle_after_ms=1000,
        lease_ids=[]).declared_dead] == [config.node_id]
    taken_by_b: set[str] = set()
    for _ in range(12):  # (node b crawls on: it leases what is queued, 2 at a time)
        node.pump()
        worker._receive(time.monotonic())
        worker._turn(time.monotonic())
        taken_by_b |= {e.entry_id for e in other.lease(epoch, 2, LEASE_MS, new_call_id())}
    node.pump()
    # then each entry it has prefetched (and will hand to its engine) is leased to it in Redis,
    # once: none went back to the queue, where node b leased it and crawls it too
    owners = lease_owners(redis_server)
    prefetched = node.link._prefetched.entry_ids()
    print(f"prefetched {len(prefetched)} ({len(set(prefetched))} distinct); "
          f"leased to b as well: {len(taken_by_b & set(prefetched))}")
    assert [i for i in prefetched if owners.get(i) != config.node_id] == []
    assert taken_by_b & set(prefetched) == set()
    assert len(prefetched) == len(set(prefetched))


class RefusesFirstBatch(JobStore):
    """A store whose first batch in a round trip meets an out-of-memory reply (Redis ran the
    calls around it)."""

    refused = False

    def flush_in(self, trip: RoundTrip, epoch: str, ops: Sequence[Any], call_id: str) -> Any:
        if self.refused:
            return super().flush_in(trip, epoch, ops, call_id)
        self.refused = True
        oom = "return redis.error_reply('OOM command not allowed when used memory > maxmemory')"
        return trip.add(lambda pipe: pipe.eval(oom, 0),
                        Answer(self.client, lambda reply: reply, lambda: self.client.eval(oom, 0)))


def test_a_lease_redis_made_in_a_round_trip_whose_batch_it_refused_is_handed_over_once(
    redis_server: RedisServer,
) -> None:
    # given a node (8 prefetched) with 16 requests queued and a push of its own to send
    store, node = node_with_16_queued(redis_server, RefusesFirstBatch)
    worker = node.worker
    node.submit(push("http://a/own"))
    # when its round trip of the push and a lease meets "OOM" for the batch (Redis made the
    # lease after it), and the node tries again
    worker._receive(time.monotonic())
    worker._turn(time.monotonic())
    assert store.refused and worker._away_since is not None and worker._pending_lease
    assert redis_server.client().hlen("clustersync:{job}:leased") == 8
    try_again(node, 4)
    # then the 8 entries Redis leased to it are in its prefetch, once each, and its push is
    # queued
    owners = lease_owners(redis_server)
    prefetched = node.link._prefetched.entry_ids()
    assert worker._away_since is None
    assert sorted(prefetched) == sorted(owners) and len(owners) == 8
    assert store.status().counters.get("pushed") == 17


class LosesFirstReply(JobStore):
    """A store whose first round trip with a batch in it is run by Redis and its replies lost
    (the connection drops as they come)."""

    lost = False

    def round_trip(self) -> RoundTrip:
        return ReplyLost(self)

    def flush_in(self, trip: RoundTrip, epoch: str, ops: Sequence[Any], call_id: str) -> Any:
        if isinstance(trip, ReplyLost):
            trip.batch = True
        return super().flush_in(trip, epoch, ops, call_id)


class ReplyLost(RoundTrip):
    def __init__(self, store: LosesFirstReply) -> None:
        super().__init__(store.client)
        self.store = store
        self.batch = False

    def send(self) -> None:
        super().send()
        if self.batch and not self.store.lost:
            self.store.lost = True
            raise StoreUnavailable("Connection closed by server.")


def test_a_round_trip_whose_replies_are_lost_is_applied_once_when_the_node_tries_again(
    redis_server: RedisServer,
) -> None:
    # given a node (8 prefetched) that holds 8 leases of 16 queued requests, all under way
    store, node = node_with_16_queued(redis_server, LosesFirstReply)
    worker = node.worker
    worker._turn(time.monotonic())
    taken = [node.take() for _ in range(8)]
    assert None not in taken
    # when its round trip of a push, the ack of one of them and a lease is run by Redis and its
    # replies are lost, and the node tries again
    node.submit(push("http://a/own"))
    node.submit(Ack(taken[0][0]))  # type: ignore[index]
    worker._receive(time.monotonic())
    worker._turn(time.monotonic())
    assert store.lost and worker._away_since is not None and worker._pending_lease
    assert store.status().counters.get("pushed") == 17  # (Redis ran it)
    try_again(node, 4)
    # then the push and the ack were applied once, and the entries Redis leased to it are
    # the 7 under way and those in its prefetch, once each
    owners = lease_owners(redis_server)
    prefetched = node.link._prefetched.entry_ids()
    under_way = {entry_id for entry_id, _ in taken[1:]}  # type: ignore[misc]
    counters = store.status().counters
    assert (counters.get("pushed"), counters.get("acked")) == (17, 1)
    assert len(prefetched) == len(set(prefetched))
    assert set(owners) == under_way | set(prefetched)
    assert worker._totals.pushed == 1


S = TypeVar("S", bound=JobStore)


def node_with_16_queued(redis_server: RedisServer, store_class: type[S]) -> tuple[S, NodeThread]:
    """A node (8 prefetched) joined to a job with 16 requests queued, its store a
    ``store_class``, its control state read (as its join does); its turns are run by hand."""
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": redis_server.url, "CLUSTERSYNC_PREFETCH": "8",
        "CLUSTERSYNC_LEASE_TIMEOUT": "30"}), "job")
    store = store_class(make_client(redis_server.url), "job", config.node_id)
    epoch, _ = store.join(ttl_ms=LEASE_MS, claim=False)
    store.flush(epoch, [push(f"http://a/{i}") for i in range(16)], new_call_id())
    node = NodeThread(store, config, epoch)
    node.worker._follow(time.monotonic())
    return store, node


def lease_owners(redis_server: RedisServer) -> dict[str, str]:
    """The job's leased entries in Redis: entry id -> the node that holds it."""
    return {as_text(i): as_text(v).split("|", 1)[1] for i, v in
            redis_server.client().hgetall("clustersync:{job}:leased").items()}


def try_again(node: NodeThread, turns: int) -> None:
    """Run ``turns`` turns of the node's Redis thread, each after the reactor's side answered
    what the thread handed it, then let the reactor's side take the last turn's answers."""
    for _ in range(turns):
        node.pump()
        node.worker._receive(time.monotonic())
        node.worker._turn(time.monotonic())
    node.pump()
