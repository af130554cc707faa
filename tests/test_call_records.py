"""A node's call record (``call:<node>``: its write counter and last call ids) lasts as long as
the node may still send writes: a spool replayed days later finds it, so its acks stay acks
instead of reading as a Redis rollback (acks turned into releases: every page crawled again)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scrapy_clustersync.node.spool import Spool
from scrapy_clustersync.node.thread_api import Undelivered
from scrapy_clustersync.store import Ack, JobStore, make_client
from scrapy_clustersync.store.job_store import CALL_RECORD_KEEP_MS, new_call_id
from testkit.redis_server import RedisServer

from support import joined, push_op

JOB = "job"


def call_ttl_ms(server: RedisServer, node: str) -> int:
    """PTTL of the node's call record: -1 = it never expires."""
    return int(server.client().pttl(f"clustersync:{{{JOB}}}:call:{node}"))


def test_the_call_record_of_a_node_that_spooled_never_expires_and_its_replayed_acks_count(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given node n1 that crawled three requests and closed while Redis was away, its acks spooled
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [push_op(f"http://a/{i}") for i in range(3)], new_call_id())
    leases = store.lease(epoch, 3, 60_000, new_call_id())
    acks = Undelivered(ops=[Ack(entry_id) for entry_id, _, _ in leases],
                       writes_seen=store.writes_seen or 0)
    Spool(tmp_path, JOB).save("n1", epoch, acks, batch_size=100)
    # then its call record has no expiry: however late the spool is replayed, it is there
    assert call_ttl_ms(redis_server, "n1") == -1
    # when a node started there replays the spool
    client = make_client(redis_server.url)
    Spool(tmp_path, JOB).replay(
        epoch, lambda node, seen: JobStore(client, JOB, node, store.dedup, writes_seen=seen))
    # then the acks are acks: the three requests are done, none handed back to be crawled again
    status = store.status()
    assert (status.counters["acked"], status.counters.get("released", 0)) == (3, 0)
    assert (status.queued, status.leased) == (0, 0)
    # and the record of n1, which will send nothing more, expires a day from now
    assert 0 < call_ttl_ms(redis_server, "n1") <= CALL_RECORD_KEEP_MS


def test_the_call_record_of_a_node_that_left_expires_a_day_later(
    redis_server: RedisServer,
) -> None:
    # given a node that wrote and is still in the job: its record does not expire
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [push_op("http://a/1")], new_call_id())
    beat: dict[str, Any] = {"lease_ms": 60_000, "info": {}, "idle": True, "idle_after_ms": 1000,
                            "lease_ids": []}
    store.heartbeat(epoch, ttl_ms=10_000, **beat)
    assert call_ttl_ms(redis_server, "n1") == -1
    # when it leaves the job (its leaving heartbeat: it had nothing left to send)
    store.heartbeat(epoch, ttl_ms=0, **beat)
    # then its record expires a day later
    assert 0 < call_ttl_ms(redis_server, "n1") <= CALL_RECORD_KEEP_MS
