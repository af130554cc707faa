"""The spool: writes a node could not send at close are sent by the next node, exactly once."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import fakeredis
import msgpack
import pytest

from scrapy_clustersync.node.spool import Spool
from scrapy_clustersync.node.thread_api import Undelivered
from scrapy_clustersync.store import JobStore, Op, Push, StoreUnavailable
from scrapy_clustersync.store.job_store import new_call_id

JOB = "job"


def pushes(count: int) -> list[Op]:
    return [Push(bytes([i + 1]) * 20, 0, f"request {i}".encode()) for i in range(count)]


def joined_store() -> tuple[JobStore, str]:
    store = JobStore(fakeredis.FakeRedis(), JOB, "n1")
    epoch, _ = store.join(ttl_ms=60_000)
    return store, epoch


def spooled(tmp_path: Path, epoch: str, ops: list[Op], node: str = "n1") -> Path:
    return Spool(tmp_path, JOB).save(node, epoch, Undelivered(ops=ops), batch_size=2)


def test_writes_spooled_at_close_are_sent_by_the_next_node_and_the_file_goes(
    tmp_path: Path,
) -> None:
    # given five writes a node could not send, spooled in batches of two
    store, epoch = joined_store()
    path = spooled(tmp_path, epoch, pushes(5))
    # when the next node started here replays the spool
    sent = Spool(tmp_path, JOB).replay(epoch, store.as_node)
    # then all five are in Redis, once, and nothing is left to replay
    assert sent == 5
    assert store.status().queued == 5
    assert not path.exists()
    assert Spool(tmp_path, JOB).replay(epoch, store.as_node) == 0
    assert store.status().queued == 5


def test_a_batch_redis_applied_before_the_node_lost_its_answer_is_not_applied_twice(
    tmp_path: Path,
) -> None:
    # given a batch in doubt: Redis applied it, the node never heard back, and spooled it
    store, epoch = joined_store()
    node = store.as_node("n1", 0)
    call_id, in_doubt = new_call_id(), pushes(2)
    node.flush(epoch, in_doubt, call_id)
    Spool(tmp_path, JOB).save("n1", epoch, Undelivered((call_id, in_doubt), [], 0), 2)
    # when it is replayed (as the node that wrote it)
    Spool(tmp_path, JOB).replay(epoch, store.as_node)
    # then Redis holds its writes once
    assert store.status().counters["pushed"] == 2


def test_a_spool_of_an_unknown_format_is_set_aside_with_a_clear_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a spool file written by a newer version
    store, epoch = joined_store()
    path = spooled(tmp_path, epoch, pushes(2))
    data = msgpack.unpackb(path.read_bytes(), raw=False)
    path.write_bytes(msgpack.packb({**data, "format": 99}, use_bin_type=True))
    # when a node replays the spool
    with caplog.at_level(logging.ERROR):
        sent = Spool(tmp_path, JOB).replay(epoch, store.as_node)
    # then nothing is sent, the file is kept aside, and the log says why and what to do
    assert sent == 0 and store.status().queued == 0
    assert path.with_name(path.name + ".unknown").exists()
    assert "spool format 99" in caplog.text and "version that wrote it" in caplog.text


def test_a_spool_of_an_earlier_incarnation_of_the_job_is_never_replayed(tmp_path: Path) -> None:
    store, epoch = joined_store()
    path = spooled(tmp_path, "an-older-epoch", pushes(2))
    assert Spool(tmp_path, JOB).replay(epoch, store.as_node) == 0
    assert store.status().queued == 0
    assert path.with_name(path.name + ".stale").exists()


def test_a_spool_another_live_node_is_replaying_is_left_to_it(tmp_path: Path) -> None:
    # given a spool file claimed by another process that still runs
    store, epoch = joined_store()
    path = spooled(tmp_path, epoch, pushes(2))
    claimed = path.with_name(f"{path.name}.replaying-{os.getppid()}")
    path.rename(claimed)
    # when this node replays the spool, it leaves that file alone
    assert Spool(tmp_path, JOB).replay(epoch, store.as_node) == 0
    assert claimed.exists()


class UnreachableStore(JobStore):
    def flush(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        raise StoreUnavailable("connection refused")


def test_a_spool_redis_cannot_take_now_is_handed_back_for_the_next_node(tmp_path: Path) -> None:
    store, epoch = joined_store()
    path = spooled(tmp_path, epoch, pushes(2))

    def unreachable(node_id: str, writes_seen: int) -> JobStore:
        return UnreachableStore(store.client, JOB, node_id, writes_seen=writes_seen)

    assert Spool(tmp_path, JOB).replay(epoch, unreachable) == 0
    assert path.exists()
    assert Spool(tmp_path, JOB).replay(epoch, store.as_node) == 2


def test_a_spooled_redirect_push_stays_in_one_batch_with_the_ack_after_it(tmp_path: Path) -> None:
    # given writes whose second op is a retry's push (a replacement) followed by its ack
    from scrapy_clustersync.store import Ack
    from scrapy_clustersync.store.write_ops import PushFlags

    retry = Push(b"", 0, b"retry", PushFlags.DONT_FILTER | PushFlags.REPLACES)
    first = Push(b"\x01" * 20, 0, b"first")
    path = Spool(tmp_path, JOB).save("n1", "e", Undelivered(ops=[first, retry, Ack("e1"),
                                                                  first]), batch_size=2)
    # when they are spooled in batches of 2, then the ack goes with its replacement
    batches = msgpack.unpackb(path.read_bytes(), raw=False)["batches"]
    assert [[op[0] for op in ops] for _, ops in batches] == [["P", "P", "A"], ["P"]]
