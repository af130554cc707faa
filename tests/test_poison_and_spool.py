"""A poison write never stops a node, and spooled writes reach Redis exactly once.

Regressions for: a malformed op (a custom fingerprinter's short fingerprint) that left its
batch half applied and was retried for ever; spool replay that applied an in-doubt batch twice,
ignored spooled releases, raced between nodes and lost its progress; a Redis thread that died
on an unexpected exception; purge that blocked Redis with DEL.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import msgpack
import pytest
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter
from unit.thread_harness import NodeThread

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import ClusterConfig, DedupSettings
from scrapy_clustersync.node import outages as worker_module
from scrapy_clustersync.node.spool import Spool
from scrapy_clustersync.node.thread_api import Undelivered
from scrapy_clustersync.plugin.cluster_dupefilter import ClusterDupeFilter, cluster_fingerprint
from scrapy_clustersync.store import (
    Ack,
    DeadLetterEntry,
    DeadLetterWrite,
    FlushResult,
    JobStore,
    Op,
    Push,
    Release,
    StoreUnavailable,
    make_client,
)
from scrapy_clustersync.store.errors import BadBatch
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.round_trip import Answer, RoundTrip
from scrapy_clustersync.store.write_ops import PackedPushes, decode_op
from testkit.redis_server import RedisServer

from support import wait_until

JOB = "job"
#: a small filter: a layer of a few KB in ~20 chunks (the default one is 18 MB)
BLOOM = DedupSettings("bloom", bloom_capacity=1000, bloom_error_rate=0.01)
EXACT = DedupSettings("exact")
CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()
#: two replayers race RACES times for RACING_NODES spool files (the old unclaimed replay
#: collided in most races)
RACES, RACING_NODES = 5, 40


# ---- helpers -------------------------------------------------------------------------------
def pushed(op: Op) -> Push:
    assert isinstance(op, Push)
    return op


def push(url: str, dont_filter: bool = False, fingerprint: bytes | None = None) -> Push:
    """A push op as the scheduler builds it; ``fingerprint`` overrides Scrapy's (malformed)."""
    request = Request(url, dont_filter=dont_filter)
    if fingerprint is None:
        fingerprint = b"" if dont_filter else FINGERPRINTER.fingerprint(request)
    return Push(fingerprint, 0, CODEC.encode(request), dont_filter)


def joined(server: RedisServer, node: str = "n1", dedup: DedupSettings = BLOOM
           ) -> tuple[JobStore, str]:
    """A store of node ``node`` that joined the job (creating it with ``dedup``) and beat once."""
    store = JobStore(make_client(server.url), JOB, node, dedup)
    epoch, _ = store.join(ttl_ms=60_000)
    store.heartbeat(epoch, ttl_ms=60_000, lease_ms=60_000, info={}, idle=False,
                    idle_after_ms=1000, lease_ids=[])
    return store, epoch


def store_factory(server: RedisServer, dedup: DedupSettings = BLOOM
                  ) -> Callable[[str, int], JobStore]:
    """What the scheduler gives Spool.replay: a store acting as the node that wrote a file."""
    client = make_client(server.url)

    def store_for(node_id: str, writes_seen: int) -> JobStore:
        return JobStore(client, JOB, node_id, dedup, writes_seen=writes_seen)

    return store_for


def queued_urls(store: JobStore) -> Counter[str]:
    """URL -> how many times it is queued (read, not leased)."""
    # bytes: make_client's replies are raw (redis-py types replies for decode_responses too),
    # and every queued id has its entry
    ids = cast("list[bytes]", store.client.zrange(store.keys.queue, 0, -1))
    blobs = cast("list[bytes]", store.client.hmget(store.keys.entries, ids) if ids else [])
    return Counter(CODEC.decode(blob).url for blob in blobs)


def leased_urls(store: JobStore, epoch: str) -> Counter[str]:
    """Lease everything queued (as ``store``'s node) and count the URLs."""
    leased = store.lease(epoch, 1000, 60_000, new_call_id())
    return Counter(CODEC.decode(blob).url for _, blob, _ in leased)


def job_keys(store: JobStore) -> dict[bytes, bytes | None]:
    """Every key of the job with its serialized value: equal snapshots = nothing changed."""
    names = cast("list[bytes]", store.client.keys(f"clustersync:{{{JOB}}}:*"))  # raw replies
    return {name: store.client.dump(name) for name in names}


def worker_config(server: RedisServer, batch_size: int) -> ClusterConfig:
    return ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": server.url, "CLUSTERSYNC_BATCH_SIZE": batch_size,
        "CLUSTERSYNC_DEDUP": BLOOM.mode, "CLUSTERSYNC_BLOOM_CAPACITY": BLOOM.bloom_capacity,
        "CLUSTERSYNC_BLOOM_ERROR_RATE": BLOOM.bloom_error_rate,
    }), JOB)


def started_worker(store: JobStore, config: ClusterConfig, epoch: str, ops: Sequence[Op]
                   ) -> NodeThread:
    """A node's Redis thread, started with ``ops`` buffered.

    It leases only what it pushed (the scheduler would crawl it); close() releases that again.
    """
    worker = NodeThread(store, config, epoch)
    worker.worker._next_lease = float("inf")  # until its first push
    for op in ops:
        worker.submit(op)
    worker.start()
    return worker


class RecordingStore(JobStore):
    """A JobStore that keeps every flush call, its own or in a round trip: (ops, refused?)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.calls: list[tuple[list[Op], bool]] = []

    def flush(self, epoch: str, ops: Sequence[Op] | PackedPushes,
              call_id: str) -> FlushResult:
        assert not isinstance(ops, PackedPushes)  # (a seed's: no node sends them)
        try:
            result = super().flush(epoch, ops, call_id)
        except BadBatch:
            self.calls.append((list(ops), True))
            raise
        self.calls.append((list(ops), False))
        return result

    def flush_in(self, trip: RoundTrip, epoch: str, ops: Sequence[Op],
                 call_id: str) -> Answer[FlushResult]:
        answer = super().flush_in(trip, epoch, ops, call_id)
        result = answer.result

        def recorded() -> FlushResult:
            try:
                value = result()
            except BadBatch:
                self.calls.append((list(ops), True))
                raise
            if not answer.late:  # (sent again on its own: flush() recorded it)
                self.calls.append((list(ops), False))
            return value

        answer.result = recorded  # type: ignore[method-assign]
        return answer


class FailingStore(JobStore):
    """A JobStore whose flush calls number ``fail_on`` (1-based, its own or in a round trip)
    fail with ``error``.

    ``applied=True``: Redis applies the call, then the failure comes (a crash before the
    node recorded the answer; flush calls of their own only).
    """

    def __init__(self, *args: Any, fail_on: set[int], error: BaseException,
                 applied: bool = False, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fail_on, self.error, self.applied = fail_on, error, applied
        self.calls = 0

    def flush(self, epoch: str, ops: Sequence[Op] | PackedPushes,
              call_id: str) -> FlushResult:
        self.calls += 1
        if self.calls not in self.fail_on:
            return super().flush(epoch, ops, call_id)
        if self.applied:
            super().flush(epoch, ops, call_id)
        raise self.error

    def flush_in(self, trip: RoundTrip, epoch: str, ops: Sequence[Op],
                 call_id: str) -> Answer[FlushResult]:
        self.calls += 1
        if self.calls in self.fail_on:
            raise self.error
        return super().flush_in(trip, epoch, ops, call_id)


def in_thread(action: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``action`` in a thread; the list gets its result or the exception it raised."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:  # the test asserts on it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def dead_pid() -> int:
    """The id of a process that has exited."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# ---- a malformed op --------------------------------------------------------------------------
@pytest.mark.parametrize(("dedup", "fingerprint"), [(EXACT, b"\x01" * 16), (BLOOM, b"\x01" * 8)],
                         ids=["exact-16-bytes", "bloom-8-bytes"])
def test_a_batch_with_a_malformed_push_is_refused_and_nothing_of_it_is_applied(
    redis_server: RedisServer, dedup: DedupSettings, fingerprint: bytes
) -> None:
    # given a job that holds some work already
    store, epoch = joined(redis_server, dedup=dedup)
    store.flush(epoch, [push("http://a/old")], new_call_id())
    before = job_keys(store)
    # when a batch whose third op has a fingerprint that is not 20 bytes is flushed
    batch = [push("http://a/first", dont_filter=True), push("http://a/second"),
             push("http://a/bad", fingerprint=fingerprint), push("http://a/after")]
    with pytest.raises(BadBatch, match=f"fingerprint of {len(fingerprint)} bytes, not 20"):
        store.flush(epoch, batch, new_call_id())
    # then no key of the job changed: queue, entries, seq, stats, dedup record, write counter
    assert job_keys(store) == before
    assert queued_urls(store) == {"http://a/old": 1}


def test_a_malformed_push_goes_to_the_dead_letters_and_the_rest_is_applied_once(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # given a node whose buffer holds one push with an 8-byte fingerprint among good writes
    batch_size = 5
    config = worker_config(redis_server, batch_size)
    store = RecordingStore(make_client(redis_server.url), JOB, config.node_id, config.dedup)
    epoch = store.join(ttl_ms=60_000)[0]
    store.flush(epoch, [push("http://a/done")], new_call_id())
    [(done_id, _, _)] = store.lease(epoch, 1, 60_000, new_call_id())
    bad = push("http://a/c", fingerprint=b"\x07" * 8)
    stream: list[Op] = [push("http://a/a", dont_filter=True), push("http://a/b"), bad, push("http://a/d"),
              Ack(done_id)]
    later = [push(f"http://a/later{i}") for i in range(2 * batch_size)]
    # when its Redis thread sends them
    worker = started_worker(store, config, epoch, [*stream, *later])
    wait_until(lambda: store.status().counters.get("pushed", 0) >= 4 + len(later), 5,
               "the good writes to reach Redis")
    undelivered = worker.close(unacked=[])
    # then a, b and d are queued once each, the ack went through, c is a dead letter ...
    assert not undelivered
    checker = JobStore(make_client(redis_server.url), JOB, "checker", config.dedup)
    assert leased_urls(checker, epoch) == Counter(
        ["http://a/a", "http://a/b", "http://a/d"] + [f"http://a/later{i}" for i in range(10)])
    assert store.status().counters["acked"] == 1
    [letter] = store.dead_letters()
    assert "fingerprint of 8 bytes, not 20" in letter.reason
    assert letter.entry == bad.request
    assert "moved to the job's dead letters" in caplog.text
    # ... found by halving in a few refused calls, not retried for ever ...
    refused = [ops for ops, was_refused in store.calls if was_refused]
    assert 1 <= len(refused) <= 2 * batch_size.bit_length()
    # ... and the node is back to full batches after it
    dead_letter_call = next(i for i, (ops, _) in enumerate(store.calls)
                            if isinstance(ops[0], DeadLetterWrite))
    assert batch_size in [len(ops) for ops, _ in store.calls[dead_letter_call:]]


def test_a_push_redis_py_cannot_send_is_dead_lettered_instead_of_retried_for_ever(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a node with a request whose priority is a bool (Scrapy takes it: bool is an int,
    # but redis-py refuses to send one) between two good pushes
    monkeypatch.setattr(worker_module, "ERROR_BACKOFF_S", 0.05)  # the old retry loop spins
    config = worker_config(redis_server, batch_size=10)
    store = JobStore(make_client(redis_server.url), JOB, config.node_id, config.dedup)
    epoch = store.join(ttl_ms=60_000)[0]
    request = Request("http://a/bool", priority=True)
    unsendable = Push(FINGERPRINTER.fingerprint(request), request.priority,
                      CODEC.encode(request))
    # when its Redis thread sends them
    worker = started_worker(store, config, epoch,
                            [push("http://a/1"), unsendable, push("http://a/2")])
    wait_until(lambda: store.status().counters.get("dead") == 1, 5,
               "the unsendable push to be dead-lettered")
    # then the good pushes are in Redis, the other one is a dead letter, the node goes on
    assert not worker.close(unacked=[])
    assert queued_urls(store) == Counter(["http://a/1", "http://a/2"])
    [letter] = store.dead_letters()
    assert letter.entry == unsendable.request


class ShortDigestFingerprinter:
    """A custom REQUEST_FINGERPRINTER_CLASS: 16 bytes (MD5) instead of Scrapy's 20."""

    def fingerprint(self, request: Request) -> bytes:
        return hashlib.md5(request.url.encode()).digest()


class UrlFingerprinter:
    """A custom REQUEST_FINGERPRINTER_CLASS that returns the URL itself, a str."""

    def fingerprint(self, request: Request) -> str:
        return request.url


@pytest.mark.parametrize("dedup", [BLOOM, EXACT], ids=["bloom", "exact"])
@pytest.mark.parametrize("fingerprinter", [ShortDigestFingerprinter(), UrlFingerprinter()],
                         ids=["16-bytes", "str"])
def test_a_custom_fingerprinter_of_any_length_dedups_in_redis(
    redis_server: RedisServer, fingerprinter: Any, dedup: DedupSettings
) -> None:
    # given a custom fingerprinter whose fingerprints are not 20 bytes
    dupefilter = ClusterDupeFilter(fingerprinter, Counter(), cache_size=100)
    urls = ["http://a/1", "http://a/2", "http://a/1", "http://a/3", "http://a/2"]
    fingerprints = [dupefilter.fingerprint(Request(url)) for url in urls]
    # then the cluster fingerprints are 20 bytes, the same for the same URL, distinct otherwise
    assert {len(fp) for fp in fingerprints} == {20}
    assert fingerprints[0] == fingerprints[2] == cluster_fingerprint(
        fingerprinter.fingerprint(Request("http://a/1")))
    assert len(set(fingerprints)) == 3
    # and when they are flushed, Redis takes them and filters the duplicates
    store, epoch = joined(redis_server, dedup=dedup)
    ops = [Push(fp, 0, CODEC.encode(Request(url)))
           for url, fp in zip(urls, fingerprints, strict=True)]
    result = store.flush(epoch, ops, new_call_id())
    assert (result.pushed, result.filtered) == (3, 2)
    assert queued_urls(store) == {"http://a/1": 1, "http://a/2": 1, "http://a/3": 1}


# ---- spool: exactly once ---------------------------------------------------------------------
def test_a_spooled_batch_that_redis_applied_before_its_answer_was_lost_is_not_applied_again(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given node n1 whose last flush ran in Redis but whose answer never came back ...
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [push("http://a/broken")], new_call_id())
    [(broken_id, _, _)] = store.lease(epoch, 1, 60_000, new_call_id())
    confirmed_writes = store.writes_seen or 0
    in_doubt: list[Op] = [push("http://a/again1", dont_filter=True),
                push("http://a/again2", dont_filter=True), push("http://a/new"),
                DeadLetterEntry(broken_id, "undecodable")]
    call_id = new_call_id()
    store.flush(epoch, in_doubt, call_id)
    # ... and which closed with it in doubt and more writes, spooled to disk
    rest: list[Op] = [push("http://a/later", dont_filter=True), push("http://a/other"),
            DeadLetterWrite("refused by Redis: test", b"record")]
    undelivered = Undelivered(pending=(call_id, in_doubt), ops=rest,
                              writes_seen=confirmed_writes)
    Spool(tmp_path, JOB).save("n1", epoch, undelivered, batch_size=2)
    # when the next node started there replays the spool
    Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server))
    # then the in-doubt batch is in Redis once, and every other write once
    assert queued_urls(store) == {"http://a/again1": 1, "http://a/again2": 1, "http://a/new": 1,
                                  "http://a/later": 1, "http://a/other": 1}
    letters = store.dead_letters()
    assert sorted(letter.reason for letter in letters) == ["refused by Redis: test",
                                                           "undecodable"]
    assert store.status().counters["pushed"] == 1 + 5
    assert list((tmp_path / JOB).iterdir()) == []


def test_spooled_releases_put_the_leases_back_in_the_queue_at_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given node n1 that holds three leases for a minute and closed while Redis was away
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [push(f"http://a/{i}") for i in range(3)], new_call_id())
    leases = store.lease(epoch, 3, 60_000, new_call_id())
    undelivered = Undelivered(ops=[Release(entry_id) for entry_id, _, _ in leases],
                              writes_seen=store.writes_seen or 0)
    Spool(tmp_path, JOB).save("n1", epoch, undelivered, batch_size=100)
    # when the next node replays the spool
    Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server))
    # then the three requests can be leased right away, not after the lease timeout
    other, _ = joined(redis_server, "n2")
    assert leased_urls(other, epoch) == Counter(["http://a/0", "http://a/1", "http://a/2"])
    assert store.status().counters["released"] == 3


def test_a_replay_under_way_keeps_its_file_and_a_node_started_meanwhile_replays_nothing(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a spool file, and a node replaying it that is slow to reach Redis
    store, epoch = joined(redis_server, "n1")
    ops = [push(f"http://a/{i}", dont_filter=True) for i in range(4)]
    path = Spool(tmp_path, JOB).save("n1", epoch, Undelivered(ops=ops), batch_size=2)
    in_replay, go_on = threading.Event(), threading.Event()
    store_for = store_factory(redis_server)

    def slow_store_for(node_id: str, writes_seen: int) -> JobStore:
        in_replay.set()
        go_on.wait(10)
        return store_for(node_id, writes_seen)

    first, first_outcome = in_thread(lambda: Spool(tmp_path, JOB).replay(epoch, slow_store_for))
    assert in_replay.wait(10)
    # when a second node started in the same directory replays meanwhile
    second_sent = Spool(tmp_path, JOB).replay(epoch, store_for)
    # then the file is still on disk (claimed by the first node) until Redis has it all ...
    [claimed] = (tmp_path / JOB).iterdir()
    assert claimed.name.startswith(f"{path.name}.replaying-")
    go_on.set()
    first.join(10)
    # ... the second node sends nothing and does not fail, and the first sends it all, once
    assert second_sent == 0
    assert first_outcome == [4]
    assert queued_urls(store) == Counter(f"http://a/{i}" for i in range(4))
    assert list((tmp_path / JOB).iterdir()) == []


def test_two_nodes_replaying_one_directory_together_send_each_file_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    store, epoch = joined(redis_server, "n1")
    store_for = store_factory(redis_server)
    outcomes: list[Any] = []
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: the replays interleave
    try:
        for race in range(RACES):  # each race starts afresh: a collision is likely in one
            # given the spool files of many nodes in one directory
            directory = tmp_path / "spools" / f"race{race}"
            for node in range(RACING_NODES):
                ops = [push(f"http://a/{race}/{node}/{i}", dont_filter=True) for i in range(2)]
                Spool(directory, JOB).save(f"node{node}", epoch, Undelivered(ops=ops),
                                           batch_size=1)
            # when two nodes replay the directory at the same moment
            start = threading.Event()

            def replay(directory: Path = directory, start: threading.Event = start) -> int:
                start.wait(10)
                return Spool(directory, JOB).replay(epoch, store_for)

            runs = [in_thread(replay) for _ in range(2)]
            time.sleep(0.01)  # both wait for the start: neither is ahead
            start.set()
            for thread, outcome in runs:
                thread.join(20)
                outcomes.extend(outcome)
    finally:
        sys.setswitchinterval(switch_interval)
    # then neither fails, and every write is in Redis exactly once
    assert all(isinstance(sent, int) for sent in outcomes), outcomes
    assert sum(outcomes) == RACES * RACING_NODES * 2
    assert queued_urls(store) == Counter(
        f"http://a/{race}/{node}/{i}"
        for race in range(RACES) for node in range(RACING_NODES) for i in range(2))
    assert not [path for path in (tmp_path / "spools").rglob("*") if path.is_file()]


def test_a_replay_cut_short_by_an_outage_keeps_only_the_batches_not_yet_sent(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a spool of three batches, and Redis that goes away at the second one
    store, epoch = joined(redis_server, "n1")
    ops = [push(f"http://a/{i}", dont_filter=True) for i in range(6)]
    path = Spool(tmp_path, JOB).save("n1", epoch, Undelivered(ops=ops), batch_size=2)
    client = make_client(redis_server.url)

    def failing_store_for(node_id: str, writes_seen: int) -> JobStore:
        return FailingStore(client, JOB, node_id, BLOOM, writes_seen=writes_seen, fail_on={2},
                            error=StoreUnavailable("connection refused"))

    # when a node replays it
    sent = Spool(tmp_path, JOB).replay(epoch, failing_store_for)
    # then the first batch is in Redis, and the file is back under its name with the others
    assert sent == 2
    assert queued_urls(store) == Counter(["http://a/0", "http://a/1"])
    assert [p.name for p in (tmp_path / JOB).iterdir()] == [path.name]
    left = msgpack.unpackb(path.read_bytes(), raw=False)["batches"]
    assert [[pushed(decode_op(op)).request for op in batch_ops] for _, batch_ops in left] == [
        [ops[2].request, ops[3].request], [ops[4].request, ops[5].request]]
    # and when the next node replays it, the rest arrives and nothing twice
    assert Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server)) == 4
    assert queued_urls(store) == Counter(f"http://a/{i}" for i in range(6))
    assert list((tmp_path / JOB).iterdir()) == []


def test_a_replay_whose_node_crashed_is_taken_over_and_sends_nothing_twice(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a node that replayed the first batch of three, and crashed after Redis applied
    # the second but before it recorded that
    store, epoch = joined(redis_server, "n1")
    ops = [push(f"http://a/{i}", dont_filter=True) for i in range(6)]
    Spool(tmp_path, JOB).save("n1", epoch, Undelivered(ops=ops), batch_size=2)
    client = make_client(redis_server.url)

    def crashing_store_for(node_id: str, writes_seen: int) -> JobStore:
        return FailingStore(client, JOB, node_id, BLOOM, writes_seen=writes_seen, fail_on={2},
                            error=KeyboardInterrupt(), applied=True)

    with pytest.raises(KeyboardInterrupt):
        Spool(tmp_path, JOB).replay(epoch, crashing_store_for)
    [claimed] = (tmp_path / JOB).iterdir()
    claimed.rename(claimed.with_name(f"{claimed.name.rsplit('-', 1)[0]}-{dead_pid()}"))
    assert queued_urls(store) == Counter(f"http://a/{i}" for i in range(4))
    # when the next node replays the directory
    Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server))
    # then it takes the dead node's claim over and sends only the third batch
    assert queued_urls(store) == Counter(f"http://a/{i}" for i in range(6))
    assert list((tmp_path / JOB).iterdir()) == []


# ---- spool: files it must not replay ----------------------------------------------------------
def test_a_spool_file_of_another_format_is_kept_aside_with_a_clear_error(
    redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a spool file of a format this version does not read: a msgpack list of ops
    name = "n1.spool"
    store, epoch = joined(redis_server, "n1")
    (tmp_path / JOB).mkdir()
    old_file = tmp_path / JOB / name
    old_file.write_bytes(msgpack.packb([push("http://a/1", dont_filter=True).args()],
                                       use_bin_type=True))
    # when a node replays the directory
    with caplog.at_level(logging.ERROR, logger="scrapy_clustersync.node.spool"):
        sent = Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server))
    # then nothing is sent, the error says why, and the file is kept under another name
    assert sent == 0
    assert queued_urls(store) == Counter()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "is not replayed" in record.getMessage()
    assert "spool format 'unknown (not a map)'" in record.getMessage()
    [kept] = (tmp_path / JOB).iterdir()
    assert kept.name == f"{name}.unknown"
    # and a later replay leaves it alone
    assert Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server)) == 0
    assert [p.name for p in (tmp_path / JOB).iterdir()] == [kept.name]


def test_a_spool_file_of_an_earlier_incarnation_of_the_job_is_kept_aside_as_stale(
    redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a spool file written before Redis lost the job (another epoch)
    store, epoch = joined(redis_server, "n1")
    ops = [push("http://a/1", dont_filter=True)]
    path = Spool(tmp_path, JOB).save("n1", "an-older-epoch", Undelivered(ops=ops), batch_size=2)
    # when a node of the job's current incarnation replays the directory
    with caplog.at_level(logging.ERROR, logger="scrapy_clustersync.node.spool"):
        sent = Spool(tmp_path, JOB).replay(epoch, store_factory(redis_server))
    # then it sends nothing and keeps the file aside, saying why
    assert sent == 0
    assert queued_urls(store) == Counter()
    assert "earlier incarnation of the job" in caplog.text
    assert [p.name for p in (tmp_path / JOB).iterdir()] == [f"{path.name}.stale"]


# ---- the Redis thread -------------------------------------------------------------------------
def test_the_redis_thread_survives_an_unexpected_exception_and_sends_the_batch_later(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a node whose flush path fails twice with a bug's exception
    monkeypatch.setattr(worker_module, "ERROR_BACKOFF_S", 0.05)
    config = worker_config(redis_server, batch_size=10)
    store = FailingStore(make_client(redis_server.url), JOB, config.node_id, config.dedup,
                         fail_on={1, 2}, error=ValueError("a bug in the flush path"))
    epoch = store.join(ttl_ms=60_000)[0]
    # when its Redis thread has writes to send
    worker = started_worker(store, config, epoch, [push("http://a/1"), push("http://a/2")])
    # then the writes reach Redis while the node runs, and the error is logged once
    wait_until(lambda: store.status().counters.get("pushed") == 2, 5,
               "the writes to reach Redis")
    errors = [r for r in caplog.records if "unexpected error in the Redis thread" in r.message]
    assert len(errors) == 1 and "a bug in the flush path" in errors[0].message
    assert not worker.close(unacked=[])
    assert queued_urls(store) == Counter(["http://a/1", "http://a/2"])


# ---- purge -------------------------------------------------------------------------------------
def test_purge_unlinks_every_key_of_the_job_bloom_chunks_included(
    redis_server: RedisServer, filter_from_first_url: None
) -> None:
    # given a job with a two-layer Bloom filter, leases, dead letters and a node's call record
    store, epoch = joined(redis_server, dedup=DedupSettings("bloom", 20, 0.01))
    store.flush(epoch, [push(f"http://a/{i}") for i in range(30)], new_call_id())
    [(entry_id, _, _)] = store.lease(epoch, 1, 60_000, new_call_id())
    store.flush(epoch, [DeadLetterEntry(entry_id, "undecodable")], new_call_id())
    store.lease(epoch, 5, 60_000, new_call_id())
    keys = job_keys(store)
    assert any(b":bloom:1:" in name for name in keys)  # the second layer's chunks
    client = redis_server.client()
    client.config_resetstat()
    # when the job is purged
    removed = store.purge()
    # then every key is gone, freed by UNLINK (in the background), never DEL
    assert removed == len(keys)
    assert job_keys(store) == {}
    stats = client.info("commandstats")
    assert stats["cmdstat_unlink"]["calls"] == 1
    assert "cmdstat_del" not in stats
