"""The results stream's writes against a real redis-server: each result once, only with an ack
that takes effect, deduplicated without a lease, refused whole at the cap."""

from __future__ import annotations

from typing import Any

import pytest

from scrapy_clustersync.results import Result, decode_record, encode_record
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.errors import ResultsFull
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import (
    AckResults,
    Failed,
    Op,
    UnleasedResults,
    decode_op,
    results_blob,
)
from testkit.redis_server import RedisServer

from support import joined, push_op


def blob(*ids: str, kind: str = "item") -> bytes:
    d = encode_record(Result("", "x", kind, "http://a/1", "s", "n1", 1, {"f": 1}))[b"d"]
    return results_blob([(rid, kind, d) for rid in ids])


def leased_one(store: JobStore, epoch: str, url: str = "http://a/1") -> str:
    store.flush(epoch, [push_op(url)], new_call_id())
    [(entry_id, _, _)] = store.lease(epoch, 10, 10_000, new_call_id())
    return entry_id


def stream(store: JobStore) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The results stream's entries, oldest first."""
    entries: Any = store.client.xrange(store.keys.results)
    return list(entries)


def stream_ids(store: JobStore) -> list[str]:
    return [decode_record(sid, fields).id for sid, fields in stream(store)]


def test_an_ack_appends_its_results_once_even_when_the_call_is_replayed(
    redis_server: RedisServer,
) -> None:
    # given a leased entry and its ack carrying two results
    store, epoch = joined(redis_server)
    entry = leased_one(store, epoch)
    call_id = new_call_id()
    ack = AckResults(entry, blob("fp:0", "fp:1"))
    # when the call is sent twice (a timed-out call redis-py retries) and the ack again later
    store.flush(epoch, [ack], call_id)
    store.flush(epoch, [ack], call_id)
    store.flush(epoch, [ack], new_call_id())
    # then each result is in the stream once, and the meta counts them
    assert stream_ids(store) == ["fp:0", "fp:1"]
    assert store.client.hget(store.keys.results_meta, "written") == b"2"


def test_a_late_ack_of_an_entry_another_node_acked_appends_nothing(
    redis_server: RedisServer,
) -> None:
    # given an entry acked with its results by one node
    store, epoch = joined(redis_server)
    entry = leased_one(store, epoch)
    store.flush(epoch, [AckResults(entry, blob("fp:0"))], new_call_id())
    # when a second node (whose lease had ended) acks it with the same results
    other = JobStore(make_client(redis_server.url), "job", "n2")
    other.join(ttl_ms=10_000)
    other.flush(epoch, [AckResults(entry, blob("fp:0"))], new_call_id())
    # then the results are in the stream once
    assert stream_ids(store) == ["fp:0"]


def test_a_failed_ack_appends_its_error_record(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server)
    entry = leased_one(store, epoch)
    failed = Failed(entry, "http://a/1", 500, "HTTP 500", 3, False,
                    blob("fp:error", kind="error"))
    store.flush(epoch, [failed], new_call_id())
    [(_, fields)] = stream(store)
    assert fields[b"k"] == b"error" and fields[b"id"] == b"fp:error"


def test_results_without_a_lease_are_appended_once_per_id(redis_server: RedisServer) -> None:
    # given start() items written, then start() run again (a take-over) writing the same ids
    store, epoch = joined(redis_server)
    store.flush(epoch, [UnleasedResults(blob("start:0", "start:1"))], new_call_id())
    store.flush(epoch, [UnleasedResults(blob("start:0", "start:1", "start:2"))], new_call_id())
    # then each id is in the stream once
    assert stream_ids(store) == ["start:0", "start:1", "start:2"]


def test_at_the_cap_a_batch_with_results_is_refused_whole_and_taken_once_trimmed(
    redis_server: RedisServer,
) -> None:
    # given a stream at its cap of 2 and a batch with a push and an ack carrying a result
    store = JobStore(make_client(redis_server.url), "job", "n1", results_max=2)
    epoch, _ = store.join(ttl_ms=10_000)
    store.flush(epoch, [UnleasedResults(blob("start:0", "start:1"))], new_call_id())
    entry = leased_one(store, epoch)
    batch: list[Op] = [push_op("http://a/2"), AckResults(entry, blob("fp:0"))]
    # when it is sent: refused, nothing applied
    with pytest.raises(ResultsFull):
        store.flush(epoch, batch, new_call_id())
    meta = store.client.hgetall(store.keys.results_meta)
    assert b"full_since_ms" in meta and meta[b"refused_full"] == b"1"
    assert store.client.xlen(store.keys.results) == 2
    # when a reader trims the stream and the batch is sent again
    store.client.xtrim(store.keys.results, maxlen=0)
    result = store.flush(epoch, batch, new_call_id())
    # then it is applied whole and the stream is no longer full
    assert result.pushed == 1 and result.acked == 1
    assert stream_ids(store) == ["fp:0"]
    assert b"full_since_ms" not in store.client.hgetall(store.keys.results_meta)


def test_a_batch_without_results_goes_through_a_full_stream(redis_server: RedisServer) -> None:
    store = JobStore(make_client(redis_server.url), "job", "n1", results_max=1)
    epoch, _ = store.join(ttl_ms=10_000)
    store.flush(epoch, [UnleasedResults(blob("start:0"))], new_call_id())
    assert store.flush(epoch, [push_op("http://a/9")], new_call_id()).pushed == 1


def test_ops_with_results_come_back_from_their_spooled_form() -> None:
    # given each op that carries results, and a failed ack spooled by an earlier version
    ops: list[Op] = [AckResults("e1", blob("fp:0")), UnleasedResults(blob("start:0")),
           Failed("e2", "http://a", 0, "DNS", 1, True, blob("fp:error", kind="error"))]
    # then each decodes from its args() (the spool's form) to the same op
    assert [decode_op(op.args()) for op in ops] == ops
    old = ["F", "e2", "http://a", 0, "DNS", 1, 1]
    assert decode_op(old) == Failed("e2", "http://a", 0, "DNS", 1, True)


def test_a_malformed_results_field_is_refused_before_any_change(
    redis_server: RedisServer,
) -> None:
    from scrapy_clustersync.store.errors import BadBatch

    store, epoch = joined(redis_server)
    with pytest.raises(BadBatch, match="results"):
        store.flush(epoch, [push_op("http://a/3"), UnleasedResults(b"\x05")], new_call_id())
    assert store.client.xlen(store.keys.results) == 0
