"""Task records and failed requests, kept by the flush and lease scripts (lua/tasks.lua).

The scripts are called directly (through JobStore) on a real redis-server: a task's state
follows its requests, late and repeated updates never move it back, the failed list keeps its
limit and its fields, and spool files of the previous version (pushes without tasks) replay.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.node.spool import SPOOL_FORMAT, Spool
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.task_records import (
    TaskRecord,
    job_control,
    read_failed,
    read_task,
    read_tasks,
)
from scrapy_clustersync.store.write_ops import (
    Ack,
    DeadLetterEntry,
    Failed,
    Op,
    OpDecodeError,
    Push,
    PushFlags,
    TaskPush,
    decode_op,
)
from testkit.redis_server import RedisServer

CODEC = RequestCodec(None, max_bytes=1 << 20)


def blob(path: str) -> bytes:
    return CODEC.encode(Request(f"http://a/{path}"))


def task_push(number: int, task: str) -> TaskPush:
    return TaskPush(bytes([number]) * 20, 0, blob(str(number)), 0, "a.test", task=task)


def failed(entry_id: str, url: str = "http://a/x", status: int = 404) -> Failed:
    return Failed(entry_id, url, status, f"HTTP {status}" if status else "TimeoutError: slow",
                  2, True)


def joined(server: RedisServer, node: str = "n1", failed_keep: int = 1000
           ) -> tuple[JobStore, str]:
    store = JobStore(make_client(server.url), "job", node, DedupSettings("exact"),
                     failed_keep=failed_keep)
    return store, store.join(ttl_ms=60_000)[0]


def flush(store: JobStore, epoch: str, *ops: Op) -> None:
    store.flush(epoch, list(ops), new_call_id())


def lease(store: JobStore, epoch: str, count: int, lease_ms: int = 60_000,
          call_id: str | None = None) -> list[str]:
    return [e.entry_id for e in store.lease(epoch, count, lease_ms, call_id or new_call_id())]


def record(store: JobStore, task: str) -> TaskRecord:
    found = read_task(store, task)
    assert found is not None
    return found


def test_a_task_goes_pending_running_then_success_once_every_request_is_done(
    redis_server: RedisServer,
) -> None:
    # given two requests of task "t" pushed
    store, epoch = joined(redis_server)
    flush(store, epoch, task_push(1, "t"), task_push(2, "t"))
    assert (record(store, "t").state, record(store, "t").open) == ("pending", 2)
    # when one is leased, then both are acked (the second after its child of the same task)
    first, second = lease(store, epoch, 2)
    assert record(store, "t").state == "running"
    flush(store, epoch, Ack(first))
    assert record(store, "t").state == "running"
    flush(store, epoch, task_push(3, "t"), Ack(second))
    assert record(store, "t").state == "running"  # the child is still queued
    [child] = lease(store, epoch, 1)
    flush(store, epoch, Ack(child))
    # then the task is a success, with its counts, its times and the node that ended it
    done = record(store, "t")
    assert (done.state, done.requests, done.open, done.done, done.failed) == (
        "success", 3, 0, 3, 0)
    assert done.node == "n1" and done.ended_ms and done.started_ms and done.created_ms
    assert done.failure is None


def test_repeated_and_late_updates_never_move_a_finished_task_back(
    redis_server: RedisServer,
) -> None:
    # given a task of two requests: one failed, one acked, so the task failed
    store, epoch = joined(redis_server)
    flush(store, epoch, task_push(1, "t"), task_push(2, "t"))
    lease_call = new_call_id()
    first, second = lease(store, epoch, 2, call_id=lease_call)
    flush(store, epoch, failed(first, "http://a/1", 500), Ack(second))
    before = record(store, "t")
    assert (before.state, before.done, before.failed) == ("failed", 2, 1)
    # when the acks come again (a retried batch under a new call id, a late duplicate ack),
    # a late failure of the acked request arrives, and the lease call is retried
    flush(store, epoch, Ack(first), failed(second, "http://a/2", 404), Ack(second))
    assert lease(store, epoch, 2, call_id=lease_call) == []
    # then nothing changed: not the state, not a count, not the first failure
    after = record(store, "t")
    assert after == before
    assert after.failure is not None and after.failure["status"] == 500
    assert [f.url for f in read_failed(store, 10)] == ["http://a/1"]
    assert store.status().counters["failed"] == 1


def test_a_late_ack_of_a_reclaimed_request_counts_once_and_a_late_lease_changes_nothing(
    redis_server: RedisServer,
) -> None:
    # given a request of task "t" leased by node a whose lease ran out, so node b leased it
    a, epoch = joined(redis_server, "a")
    b, _ = joined(redis_server, "b")
    flush(a, epoch, task_push(1, "t"))
    [entry] = lease(a, epoch, 1, lease_ms=1)
    time.sleep(0.05)
    assert lease(b, epoch, 1) == [entry]  # reclaimed, then leased to b
    # when b acks it (the task succeeds), then a's late failure and a's retried lease arrive
    flush(b, epoch, Ack(entry))
    success = record(a, "t")
    flush(a, epoch, failed(entry, "http://a/1", 0))
    assert lease(a, epoch, 1) == []
    # then the task stays a success, done once, and no failure is recorded
    assert record(a, "t") == success
    assert (success.state, success.done, success.node) == ("success", 1, "b")
    assert read_failed(a, 10) == []


def test_a_dedup_dropped_push_of_a_task_is_counted_and_a_dead_letter_fails_the_task(
    redis_server: RedisServer,
) -> None:
    # given a task whose second push is a duplicate of its first
    store, epoch = joined(redis_server)
    flush(store, epoch, task_push(1, "t"), task_push(1, "t"))
    [entry] = lease(store, epoch, 1)
    # when its one entry cannot be decoded and is dead-lettered
    flush(store, epoch, DeadLetterEntry(entry, "cannot be decoded"))
    # then the task failed with that reason, and the duplicate was counted as filtered
    done = record(store, "t")
    assert (done.state, done.requests, done.filtered, done.failed) == ("failed", 1, 1, 1)
    assert done.failure is not None and done.failure["error"].startswith("dead letter: cannot")


def test_the_job_keeps_its_newest_failed_requests_up_to_the_limit_with_their_reason(
    redis_server: RedisServer,
) -> None:
    # given a job that keeps 3 failed requests, and 5 requests leased, one of a task
    store, epoch = joined(redis_server, failed_keep=3)
    flush(store, epoch, *(Push(bytes([i]) * 20, 0, blob(str(i))) for i in range(4)),
          task_push(9, "t"))
    entries = lease(store, epoch, 5)
    # when all five fail, in two batches
    flush(store, epoch, *(failed(e, f"http://a/{n}", 404) for n, e in enumerate(entries[:3])))
    flush(store, epoch, failed(entries[3], "http://a/3", 0), failed(entries[4], "http://a/9", 503))
    # then the 3 newest are kept, newest first, each with what failed, where, when and how
    kept = read_failed(store, 10)
    assert [f.url for f in kept] == ["http://a/9", "http://a/3", "http://a/2"]
    newest, timeout = kept[0], kept[1]
    assert (newest.status, newest.error, newest.attempts, newest.errback, newest.task,
            newest.node, newest.entry) == (503, "HTTP 503", 2, True, "t", "n1", entries[4])
    assert (timeout.status, timeout.error, timeout.task) == (None, "TimeoutError: slow", None)
    assert newest.at_ms >= timeout.at_ms > 0
    assert store.status().counters["failed"] == 5


def test_no_failed_request_is_kept_with_a_limit_of_zero(redis_server: RedisServer) -> None:
    store, epoch = joined(redis_server, failed_keep=0)
    flush(store, epoch, task_push(1, "t"))
    [entry] = lease(store, epoch, 1)
    flush(store, epoch, failed(entry))
    assert read_failed(store, 10) == []
    assert record(store, "t").state == "failed"  # the task still knows


# ---- spool files: the previous version's pushes, and this version's ops ------------------------
def test_a_spool_file_of_the_previous_version_replays_and_its_pushes_have_no_task(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a spool file as the previous version wrote it: pushes of 4 fields, then an ack
    store, epoch = joined(redis_server)
    flush(store, epoch, Push(b"\x07" * 20, 0, blob("leased")))
    [leased] = lease(store, epoch, 1)
    old_ops = [["P", b"\x01" * 20, 0, blob("1"), 0], ["P", b"", 3, blob("2"), 1],
               ["A", leased]]
    data = {"format": SPOOL_FORMAT, "job": "job", "node": "n1", "epoch": epoch,
            "writes_seen": store.writes_seen, "batches": [["c1", old_ops]]}
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "n1.spool").write_bytes(msgpack.packb(data, use_bin_type=True))
    # when a node of this version replays it
    sent = Spool(tmp_path, "job").replay(epoch, lambda node, writes: store.as_node(node, writes))
    # then every write is applied: two pushes (no task), one ack; the file is gone
    assert sent == 3
    status = store.status()
    assert (status.queued, status.leased, status.counters["acked"]) == (2, 0, 1)
    assert list((tmp_path / "job").iterdir()) == []
    assert store.client.hlen(store.keys.task_of) == 0


def test_a_push_spooled_by_the_previous_version_without_a_site_still_decodes() -> None:
    # a push's arguments end in its site (and a task push's then in its task); the previous
    # version spooled them without the site: those go to the job's legacy queue (site "")
    push = Push(b"\x01" * 20, 2, b"blob", int(PushFlags.LIFO), "a.test")
    assert push.args() == ["P", b"\x01" * 20, 2, b"blob", 4, "a.test"]
    assert TaskPush(b"\x01" * 20, 2, b"blob", 4, "a.test", "t").args() == [
        "T", b"\x01" * 20, 2, b"blob", 4, "a.test", "t"]
    assert decode_op(["P", b"\x01" * 20, 2, b"blob", 4]) == Push(b"\x01" * 20, 2, b"blob", 4)
    assert decode_op(["T", b"\x01" * 20, 2, b"blob", 4, "t"]) == TaskPush(
        b"\x01" * 20, 2, b"blob", 4, "", "t")
    with pytest.raises(OpDecodeError, match="task id"):
        decode_op(["T", b"\x01" * 20, 2, b"blob", 4, ""])


def test_spooled_task_pushes_and_failed_acks_replay_into_the_task(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given this version's spool file: a task's push and the failed ack of its leased request
    store, epoch = joined(redis_server)
    flush(store, epoch, task_push(1, "t"))
    [leased] = lease(store, epoch, 1)
    ops = [task_push(2, "t").args(), failed(leased, "http://a/1", 410).args()]
    data = {"format": SPOOL_FORMAT, "job": "job", "node": "n1", "epoch": epoch,
            "writes_seen": store.writes_seen, "batches": [["c1", ops]]}
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "n1.spool").write_bytes(msgpack.packb(data, use_bin_type=True))
    # when it is replayed
    Spool(tmp_path, "job").replay(epoch, lambda node, writes: store.as_node(node, writes))
    # then the task has its second request open and its first failure recorded
    replayed = record(store, "t")
    assert (replayed.state, replayed.requests, replayed.open, replayed.failed) == (
        "running", 2, 1, 1)
    assert [f.status for f in read_failed(store, 10)] == [410]


def test_unfinished_tasks_show_paused_or_terminated_with_their_job_and_finished_ones_do_not(
    redis_server: RedisServer,
) -> None:
    # given a running task and a finished one
    store, epoch = joined(redis_server)
    flush(store, epoch, task_push(1, "open"), task_push(2, "done"))
    first, second = lease(store, epoch, 2)
    flush(store, epoch, Ack(second))
    shown = {}
    # when the job is paused, then stopping (the job-control state in the meta hash)
    for control in ("paused", "stopping", "running"):
        store.client.hset(store.keys.meta, "control", control)
        found = {t.task: t.shown_state(job_control(store)) for t in read_tasks(store)}
        shown[control] = (found["open"], found["done"])
    # then the unfinished task shows the job's state; the stored record is unchanged
    assert shown == {"paused": ("paused", "success"), "stopping": ("terminated", "success"),
                     "running": ("running", "success")}
    assert record(store, "open").state == "running"


@pytest.mark.parametrize("op", [task_push(1, "t"), failed("e1"), failed("e2", status=0)],
                         ids=["task-push", "failed", "failed-without-status"])
def test_the_new_ops_read_back_from_a_spool_and_a_failed_ack_becomes_a_release_on_rollback(
    op: Op,
) -> None:
    # given the op as a spool file keeps it
    stored = msgpack.packb(op.args(), use_bin_type=True)
    # then it reads back as itself, and a failed ack is an ack (voided into a release when
    # Redis came back older: the request is crawled again, its failure recorded then)
    assert decode_op(msgpack.unpackb(stored, raw=False)) == op
    if isinstance(op, Failed):
        assert isinstance(op, Ack) and op.settles == op.entry_id
        assert op.as_release().args() == ["N", op.entry_id]
