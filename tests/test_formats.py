"""Each stored format has one owner: what the Lua scripts write, the Python parser reads.

The scripts run against a real redis-server through JobStore; the raw keys are then read and
parsed by store/records.py.
"""

from __future__ import annotations

import pytest
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.bloom_layout import BloomParams, layer
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.records import (
    NODE_RECORD_UNREADABLE,
    REFUSED_WRITE_ID,
    BloomLayout,
    DeadLetter,
    FormatError,
    LeaseValue,
    format_node_record,
    parse_node_record,
)
from scrapy_clustersync.store.write_ops import DeadLetterEntry, DeadLetterWrite, Push
from testkit.redis_server import RedisServer

CODEC = RequestCodec(None, max_bytes=1 << 20)
BLOOM = DedupSettings("bloom", bloom_capacity=1000, bloom_error_rate=0.01)


def joined(server: RedisServer, node: str = "n1") -> tuple[JobStore, str]:
    store = JobStore(make_client(server.url), "job", node, BLOOM)
    return store, store.join(ttl_ms=60_000)[0]


def leased_entry(store: JobStore, epoch: str, priority: int = 0) -> tuple[str, bytes]:
    """Push one request and lease it: (entry id, encoded request)."""
    store.flush(epoch, [Push(b"\x03" * 20, priority, CODEC.encode(Request("http://a/1")))],
                new_call_id())
    [(entry_id, blob, _)] = store.lease(epoch, 1, 60_000, new_call_id())
    return entry_id, blob


# ---- what the scripts wrote, read back ---------------------------------------------------------
def test_the_bloom_layout_the_flush_script_stores_parses_to_the_layer_it_was_given(
    redis_server: RedisServer, filter_from_first_url: None,
) -> None:
    # given a Bloom job whose first layer the flush script took into use
    store, epoch = joined(redis_server)
    store.flush(epoch, [Push(b"\x01" * 20, 0, b"blob")], new_call_id())
    # when its layout is read back
    raw = store.client.hget(store.keys.bloom, "layout0")
    assert isinstance(raw, bytes)
    # then it is the layout of layer 0, field by field, and status counts its bytes
    first = layer(BloomParams(BLOOM.bloom_capacity, BLOOM.bloom_error_rate), 0)
    parsed = BloomLayout.parse(raw)
    assert parsed == (first.bits, first.hashes, first.chunk_bits, first.chunks, first.capacity)
    assert parsed.format() == raw.decode()
    assert store.status().dedup["bytes"] == first.bytes == parsed.size_bytes


def test_the_lease_value_the_lease_script_stores_names_the_queue_score_and_the_node(
    redis_server: RedisServer,
) -> None:
    # given node n1 that leased a request of priority 7
    store, epoch = joined(redis_server, "n1")
    entry_id, _ = leased_entry(store, epoch, priority=7)
    # when its lease value is read back
    raw = store.client.hget(store.keys.leased, entry_id)
    assert isinstance(raw, bytes)
    # then it holds the entry's queue score (-priority) and the node
    assert LeaseValue.parse(raw) == LeaseValue(-7.0, "n1")
    assert LeaseValue(-7.0, "n1").format() == raw.decode()


def test_the_dead_letter_of_a_leased_entry_parses_to_its_id_node_time_reason_and_request(
    redis_server: RedisServer,
) -> None:
    # given a leased entry that node n1 dead-letters with a reason of two lines
    store, epoch = joined(redis_server, "n1")
    entry_id, blob = leased_entry(store, epoch)
    before_ms = store.status().server_ms
    store.flush(epoch, [DeadLetterEntry(entry_id, "cannot be decoded:\nsecond line")],
                new_call_id())
    # when the record is read back
    [raw] = store.client.lrange(store.keys.dead, 0, -1)
    letter = DeadLetter.parse(raw)
    # then every field is there, the reason on one line, and the request after it
    assert (letter.entry_id, letter.node, letter.reason, letter.entry) == (
        entry_id, "n1", "cannot be decoded: second line", blob)
    assert before_ms <= letter.at_ms <= store.status().server_ms
    assert letter.format() == raw
    assert store.dead_letters() == [letter]


def test_the_dead_letter_of_a_refused_write_parses_with_the_refused_id_and_what_it_was(
    redis_server: RedisServer,
) -> None:
    # given node n1 that dead-letters a write Redis refused
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [DeadLetterWrite("refused by Redis: test", b"\x00record\nwith a newline")],
                new_call_id())
    # when the record is read back
    [raw] = store.client.lrange(store.keys.dead, 0, -1)
    letter = DeadLetter.parse(raw)
    # then it has no entry id, and keeps the write whole, newline included
    assert (letter.entry_id, letter.node, letter.reason, letter.entry) == (
        REFUSED_WRITE_ID, "n1", "refused by Redis: test", b"\x00record\nwith a newline")
    assert letter.format() == raw


def test_the_node_record_a_heartbeat_stores_parses_back_to_what_the_node_sent(
    redis_server: RedisServer,
) -> None:
    # given node n1 whose heartbeat sends its record
    store, epoch = joined(redis_server, "n1")
    info = {"host": "crawler-1", "pid": 4242, "pages": 17, "cpu_percent": 12.5,
            "spider": None, "state": "running"}
    store.heartbeat(epoch, ttl_ms=60_000, lease_ms=60_000, info=info, idle=False,
                    idle_after_ms=1000, lease_ids=[])
    # when the record is read back
    raw = store.client.hget(store.keys.node_info, "n1")
    assert isinstance(raw, bytes)
    # then it is what the node sent, and status shows it with the node's liveness
    assert parse_node_record(raw) == info
    [node] = store.status().nodes
    assert node == info | {"id": "n1", "alive": True, "idle": False, "stats": {},
                           "last_beat_ms": node["last_beat_ms"], "silent_s": node["silent_s"]}
    assert node["silent_s"] < 5


# ---- the formats on their own ------------------------------------------------------------------
def test_values_of_another_form_are_refused_with_the_format_they_miss() -> None:
    with pytest.raises(FormatError, match="is not 5 integers"):
        BloomLayout.parse("1 2 3")
    with pytest.raises(FormatError, match="is not '<queue score>|<node id>'"):
        LeaseValue.parse(b"no separator")
    with pytest.raises(FormatError, match="is not '<entry id>"):
        DeadLetter.parse(b"id\tnode\tnot a time\treason\nentry")


def test_a_node_record_that_is_no_json_object_is_shown_as_unreadable_not_fatal() -> None:
    assert parse_node_record(b"[1, 2]") == {NODE_RECORD_UNREADABLE: "[1, 2]"}
    assert parse_node_record(b"{not json") == {NODE_RECORD_UNREADABLE: "{not json"}
    assert parse_node_record(format_node_record({"pid": 1})) == {"pid": 1}


def test_a_dead_letter_formats_its_reason_on_one_line_and_parses_back() -> None:
    letter = DeadLetter("e1", "n1", 1234, "two\nlines", b"entry\nbytes")
    assert DeadLetter.parse(letter.format()) == DeadLetter("e1", "n1", 1234, "two lines",
                                                           b"entry\nbytes")


def test_a_lease_value_formats_a_whole_score_as_redis_does() -> None:
    assert LeaseValue(-7.0, "host:1").format() == "-7|host:1"
    assert LeaseValue.parse("2.5|host:1|x") == LeaseValue(2.5, "host:1|x")
