"""The write operations: one typed record per kind, the same protocol in Python and in Lua.

A record's ``args()`` is what flush.lua reads, ``decode_op`` reads it back (the spool's form),
and the script's one op table agrees with the records on every opcode's field count.
"""

from __future__ import annotations

import logging
import re
from importlib import resources
from pathlib import Path
from typing import Any

import msgpack
import pytest
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.node.spool import SPOOL_FORMAT, Spool
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.errors import BadBatch
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import (
    OP_FIELD_TYPES,
    Ack,
    DeadLetterEntry,
    DeadLetterWrite,
    Op,
    OpDecodeError,
    Push,
    PushFlags,
    Release,
    StartDone,
    dead_letter_for,
    decode_op,
)
from testkit.redis_server import RedisServer

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINT = b"\x05" * 20
PUSH = Push(FINGERPRINT, -3, CODEC.encode(Request("http://a/page")))
PUSH_AGAIN = Push(b"", 7, CODEC.encode(Request("http://a/again")), flags=PushFlags.DONT_FILTER)
ACK = Ack("00000000000000011234abcd")
RELEASE = Release("00000000000000021234abcd")
DEAD = DeadLetterEntry("00000000000000031234abcd", "cannot be decoded")
REFUSED = DeadLetterWrite("refused by Redis: test", b"record")
ONE_OF_EACH: list[Op] = [PUSH, PUSH_AGAIN, ACK, RELEASE, DEAD, REFUSED, StartDone()]


class RawOp:
    """Script arguments no record would build: what a bug or a foreign writer could send."""

    def __init__(self, *args: Any) -> None:
        self._args = list(args)

    def args(self) -> list[Any]:
        return self._args


def joined(server: RedisServer, dedup: DedupSettings) -> tuple[JobStore, str]:
    store = JobStore(make_client(server.url), "job", "n1", dedup)
    return store, store.join(ttl_ms=60_000)[0]


# ---- the records ------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ONE_OF_EACH, ids=lambda op: type(op).__name__)
def test_every_op_reads_back_from_its_script_arguments_after_a_msgpack_round_trip(op: Op) -> None:
    # given an op's script arguments as the spool keeps them on disk
    stored = msgpack.packb(op.args(), use_bin_type=True)
    # when they are read back
    decoded = decode_op(msgpack.unpackb(stored, raw=False))
    # then it is the same op
    assert decoded == op


def test_the_script_arguments_are_the_opcode_then_the_fields_flush_lua_reads() -> None:
    push, again, ack, release, dead, refused, start = (
        PUSH, PUSH_AGAIN, ACK, RELEASE, DEAD, REFUSED, StartDone())
    assert push.args() == ["P", FINGERPRINT, -3, push.request, 0, push.site]
    assert again.args() == ["P", b"", 7, again.request, 1, again.site]
    assert ack.args() == ["A", ack.entry_id]
    assert release.args() == ["N", release.entry_id]
    assert dead.args() == ["D", dead.entry_id, "cannot be decoded"]
    assert refused.args() == ["X", "refused by Redis: test", b"record"]
    assert start.args() == ["S"]


def test_acks_releases_and_dead_letters_of_entries_settle_their_lease_and_nothing_else_does(
) -> None:
    settled = {type(op).__name__: op.settles for op in ONE_OF_EACH}
    assert settled == {
        "Push": None, "Ack": "00000000000000011234abcd", "Release": "00000000000000021234abcd",
        "DeadLetterEntry": "00000000000000031234abcd", "DeadLetterWrite": None,
        "StartDone": None,
    }


def test_a_push_describes_itself_by_its_url_and_an_unreadable_one_says_so() -> None:
    assert ONE_OF_EACH[0].describe().startswith("push of http://a/page (fingerprint ")
    assert Push(FINGERPRINT, 0, b"\xc1 not an envelope").describe().startswith("push of ? ")
    assert Ack("e1").describe() == "ack of entry e1"
    assert len(DeadLetterEntry("e1", "x" * 500).describe()) == 200


@pytest.mark.parametrize(("args", "message"), [
    ([], "an empty op"),
    (["Q", "e1"], "unknown opcode 'Q'; this version writes P, T, A, F, N, D, X, S"),
    ([b"A", "e1"], "unknown opcode b'A'"),
    (["A"], "op 'A' has 0 fields, not 1"),
    (["P", FINGERPRINT, 0, b"blob"], "op 'P' has 3 fields, not 5"),
    (["S", "extra"], "op 'S' has 1 fields, not 0"),
    (["P", "text, not bytes", 0, b"blob", 0], "field fingerprint is 'text, not bytes'"),
    (["P", FINGERPRINT, 0, b"blob", "2"], "field flags is '2', not of type int"),
    (["P", FINGERPRINT, 0, b"blob", 16], "not a combination of PushFlags"),
    (["D", "e1", b"reason as bytes"], "field reason is b'reason as bytes', not of type str"),
])
def test_arguments_that_are_no_op_of_this_version_are_refused_with_the_reason(
    args: list[Any], message: str
) -> None:
    with pytest.raises(OpDecodeError, match=re.escape(message)):
        decode_op(args)


def test_a_refused_write_becomes_a_dead_letter_that_keeps_what_it_was() -> None:
    push, ack = PUSH, ACK
    assert dead_letter_for(push, "why") == DeadLetterWrite("refused by Redis: why", push.request)
    assert dead_letter_for(ack, "why") == DeadLetterWrite(
        "refused by Redis: why", msgpack.packb(ack.args(), use_bin_type=True))
    assert dead_letter_for(REFUSED, "why") is None  # even the dead letter was refused
    assert ack.as_release() == Release(ack.entry_id)


# ---- one op table, in Python and in Lua -------------------------------------------------------
def test_the_flush_script_has_one_op_table_and_it_agrees_with_the_records() -> None:
    script = resources.files("scrapy_clustersync.store").joinpath("lua/flush.lua").read_text()
    [table] = re.findall(r"local OP_FIELDS = \{([^}]*)\}", script)
    lua = {name: int(count) for name, count in re.findall(r"(\w) = (\d+)", table)}
    assert lua == {opcode: len(fields) for opcode, fields in OP_FIELD_TYPES.items()}


@pytest.mark.parametrize("dedup", [DedupSettings("exact"), DedupSettings("bloom", 100, 0.01)],
                         ids=["exact", "bloom"])
def test_a_batch_with_every_kind_of_op_is_applied_in_order(
    redis_server: RedisServer, dedup: DedupSettings
) -> None:
    # given a job with three leased entries
    store, epoch = joined(redis_server, dedup)
    pushes = [Push(bytes([i]) * 20, 0, CODEC.encode(Request(f"http://a/{i}"))) for i in range(3)]
    store.flush(epoch, pushes, new_call_id())
    acked, released, dead = (entry_id for entry_id, _, _ in store.lease(epoch, 3, 60_000,
                                                                      new_call_id()))
    # when one batch holds every kind of op, pushes between and after the others
    batch: list[Op] = [Push(b"\x09" * 20, 1, b"new"), Ack(acked), Release(released),
                       DeadLetterEntry(dead, "undecodable"), Push(b"\x09" * 20, 1, b"dup"),
                       DeadLetterWrite("refused by Redis: test", b"record"), StartDone(),
                       Push(b"", 2, b"forced", flags=PushFlags.DONT_FILTER)]
    result = store.flush(epoch, batch, new_call_id())
    # then each op did its part, read at the right place in the arguments
    figures = (result.pushed, result.filtered, result.acked, result.released, result.dead)
    assert figures == (2, 1, 1, 1, 2)
    status = store.status()
    assert (status.queued, status.leased, status.start_done) == (3, 0, True)
    assert [letter.entry_id for letter in store.dead_letters()] == ["-", dead]


@pytest.mark.parametrize(("raw", "why"), [
    (RawOp("Q", "e1"), "unknown opcode Q"),
    (RawOp("D", "e1"), "missing fields"),
    (RawOp("A", ""), "empty entry id"),
    (RawOp("P", FINGERPRINT, 0, b"blob", 16, "a"), "flags must be an integer from 0 to 15"),
    (RawOp("P", FINGERPRINT, "inf", b"blob", 0, "a"), "priority is not a finite number"),
    (RawOp("P", b"short", 0, b"blob", 0, "a"), "fingerprint of 5 bytes, not 20"),
    (RawOp("P", FINGERPRINT, 0, b"blob", 0, "a\tb"), "a site holds no tab and no newline"),
])
def test_the_script_still_refuses_a_malformed_op_by_its_number_before_any_change(
    redis_server: RedisServer, raw: RawOp, why: str
) -> None:
    # given a job, and a batch whose third op is malformed
    store, epoch = joined(redis_server, DedupSettings("bloom", 100, 0.01))
    batch: list[Any] = [Push(b"\x01" * 20, 0, b"a"), StartDone(), raw]
    # when it is flushed
    with pytest.raises(BadBatch, match=re.escape(f"CLUSTERSYNC_BAD_OP 3 {why}")):
        store.flush(epoch, batch, new_call_id())
    # then nothing of it was applied
    status = store.status()
    assert (status.queued, status.start_done) == (0, False)


@pytest.mark.parametrize("server", ["redis-server", "fakeredis"])
def test_requests_of_every_size_travel_whole_in_the_packed_ops(
    redis_server: RedisServer, server: str
) -> None:
    # given a job on Redis (its cmsgpack reads the ops) or on fakeredis (flush.lua's own reader)
    if server == "fakeredis":
        import fakeredis

        store = JobStore(fakeredis.FakeRedis(), "job", "n1", DedupSettings("exact"))
        epoch = store.join(ttl_ms=60_000)[0]
    else:
        store, epoch = joined(redis_server, DedupSettings("exact"))
    # when pushes whose requests take every msgpack string size (fix, 8, 16 and 32 bit
    # lengths) and bytes of every value are flushed in one batch
    sizes = [0, 31, 32, 255, 256, 65_535, 65_536, 200_000]
    blobs = [bytes(range(256)) * (size // 256) + bytes(range(size % 256)) for size in sizes]
    pushes = [Push(bytes([i + 1]) * 20, -i, blob, 0, f"site{i}") for i, blob in enumerate(blobs)]
    result = store.flush(epoch, pushes, new_call_id())
    # then every request is queued byte for byte, with its priority
    assert result.pushed == len(sizes)
    leased = store.lease(epoch, len(sizes), 60_000, new_call_id())
    assert [(blob, priority) for _, blob, priority in leased] == [
        (blob, -i) for i, blob in enumerate(blobs)]


# ---- the spool reads ops through the decoder ----------------------------------------------------
@pytest.mark.parametrize(("bad_op", "reason"), [
    (["Z", "e1"], "unknown opcode 'Z'"), (["A", "e1", "e2"], "op 'A' has 2 fields, not 1"),
], ids=["unknown-opcode", "wrong-field-count"])
def test_a_spool_file_with_an_op_that_does_not_decode_is_kept_aside_and_nothing_is_sent(
    redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    bad_op: list[Any], reason: str
) -> None:
    # given a spool file of this format whose second batch holds an op this version cannot read
    store, epoch = joined(redis_server, DedupSettings("exact"))
    good = Push(b"", 0, CODEC.encode(Request("http://a/1")), flags=PushFlags.DONT_FILTER).args()
    data = {"format": SPOOL_FORMAT, "job": "job", "node": "n1", "epoch": epoch,
            "writes_seen": 0, "batches": [["c1", [good]], ["c2", [good, bad_op]]]}
    (tmp_path / "job").mkdir()
    path = tmp_path / "job" / "n1.spool"
    path.write_bytes(msgpack.packb(data, use_bin_type=True))
    # when a node replays the directory
    with caplog.at_level(logging.ERROR, logger="scrapy_clustersync.node.spool"):
        sent = Spool(tmp_path, "job").replay(epoch, lambda node, writes: store)
    # then nothing is sent, not even the good batch before it, and the error says why
    assert sent == 0
    assert store.status().queued == 0
    assert f"batch 2: {reason}" in caplog.text and "none of them is sent" in caplog.text
    assert [p.name for p in (tmp_path / "job").iterdir()] == ["n1.spool.unreadable"]
