"""The Bloom filter dedup in Redis: growth past capacity, atomic across nodes, never blocking,
and the classic layout of the jobs made before still read and grown.

The layout arithmetic (memory near the minimum) is tested in tests/unit/test_bloom.py.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import random
import threading
from pathlib import Path
from typing import cast

import pytest
import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, Op, Push, StoreError, make_client
from scrapy_clustersync.store.bloom_layout import BloomParams, layer
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.join_scripts import DedupRecord, RestartScript
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.records import BloomLayout
from testkit.dedup_probe import create_classic_job, false_positives
from testkit.redis_server import RedisServer

from conftest import RedisFactory, SiteFactory
from support import missing_pages, pages_fetched_twice, start_nodes, wait_all


@pytest.fixture(autouse=True)
def _filter_from_first_url(filter_from_first_url: None) -> None:
    """These tests are about the filter's layers: no exact set before them."""


def bloom_store(url: str, capacity: int, error: float, node: str = "n1",
                classic: bool = False) -> tuple[JobStore, str]:
    """A node of Bloom job "job"; ``classic``: the job is made as earlier versions made it."""
    if classic:
        create_classic_job(make_client(url), "job", capacity, error)
    store = JobStore(make_client(url), "job", node, DedupSettings("bloom", capacity, error))
    return store, store.join(ttl_ms=60_000)[0]


def layers_for(params: BloomParams, entries: int) -> int:
    """How many layers a filter of ``params`` takes into use for ``entries``."""
    count, room = 0, 0
    while room < entries:
        room += layer(params, count).capacity
        count += 1
    return count


def push_ops(fingerprints: list[bytes]) -> list[Op]:
    return [Push(fp, 0, b"") for fp in fingerprints]


def insert(store: JobStore, epoch: str, fingerprints: list[bytes]) -> tuple[int, int]:
    """Push every fingerprint; return (pushed, filtered)."""
    pushed = filtered = 0
    for start in range(0, len(fingerprints), 500):
        result = store.flush(epoch, push_ops(fingerprints[start:start + 500]), new_call_id())
        pushed, filtered = pushed + result.pushed, filtered + result.filtered
    return pushed, filtered


def random_fingerprints(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(20) for _ in range(count)]


def test_the_filter_grows_past_its_capacity_and_stays_within_its_error_rate(
    redis_server: RedisServer,
) -> None:
    # given a filter planned for 100 URLs at 1%
    store, epoch = bloom_store(redis_server.url, capacity=100, error=0.01)
    # when 2,000 distinct URLs go in (layers of 100, 200, 400, 800, 1,600)
    insert(store, epoch, random_fingerprints(2_000, seed=1))
    # then it grew several layers, and fresh URLs are wrongly "seen" at most 1.2x the rate
    assert store.status().dedup["layers"] >= 4
    _, false_positives = insert(store, epoch, random_fingerprints(50_000, seed=2))
    assert false_positives / 50_000 <= 1.2 * 0.01


def test_known_urls_are_always_filtered(redis_server: RedisServer) -> None:
    store, epoch = bloom_store(redis_server.url, capacity=500, error=0.001)
    known = random_fingerprints(3000, seed=3)
    insert(store, epoch, known)
    assert insert(store, epoch, known) == (0, 3000)  # no false negatives, across layers


def push_same_urls(url: str, seed: int) -> None:
    store, epoch = bloom_store(url, capacity=200, error=1e-9, node=f"p{seed}")
    codec, fingerprinter = RequestCodec(None, 1 << 16), RequestFingerprinter()
    urls = [f"http://site/{i}" for i in range(2_000)]
    random.Random(seed).shuffle(urls)
    for start in range(0, len(urls), 50):
        requests = [Request(u) for u in urls[start:start + 50]]
        ops: list[Op] = [Push(fingerprinter.fingerprint(r), 0, codec.encode(r)) for r in requests]
        store.flush(epoch, ops, new_call_id())


def test_two_processes_pushing_the_same_2000_urls_queue_each_exactly_once(
    redis_server: RedisServer,
) -> None:
    # 40 flushes each, through six layers: the two interleave while the filter grows
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=push_same_urls, args=(redis_server.url, seed))
               for seed in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    store, epoch = bloom_store(redis_server.url, capacity=200, error=1e-9)
    codec = RequestCodec(None, 1 << 16)
    queued = [codec.decode(blob).url for _, blob, _ in store.lease(epoch, 4_000, 60_000, "x")]
    assert store.status().dedup["layers"] == layers_for(BloomParams(200, 1e-9), 2_000) == 6
    assert len(queued) == 2_000 and len(set(queued)) == 2_000


def test_the_filter_survives_a_redis_restart_with_persistence(redis_factory: RedisFactory) -> None:
    redis = redis_factory(persistence=True)
    store, epoch = bloom_store(redis.url, capacity=1000, error=0.001)
    known = random_fingerprints(3000, seed=4)
    insert(store, epoch, known)
    redis.restart()
    store, epoch = bloom_store(redis.url, capacity=1000, error=0.001)
    assert insert(store, epoch, known) == (0, 3000)
    assert insert(store, epoch, random_fingerprints(100, seed=5))[0] >= 99


def test_the_jobs_own_dedup_settings_win_over_a_late_nodes(redis_server: RedisServer) -> None:
    first, _ = bloom_store(redis_server.url, capacity=1000, error=0.001)
    late = JobStore(make_client(redis_server.url), "job", "n2", DedupSettings("exact"))
    late.join(ttl_ms=1000)
    assert late.dedup == first.dedup == DedupSettings("bloom", 1000, 0.001)


def test_exact_dedup_never_skips_a_new_url(redis_server: RedisServer) -> None:
    store = JobStore(make_client(redis_server.url), "job", "n1", DedupSettings("exact"))
    epoch = store.join(ttl_ms=1000)[0]
    fingerprints = random_fingerprints(5000, seed=6)
    assert insert(store, epoch, fingerprints) == (5000, 0)
    assert insert(store, epoch, fingerprints) == (0, 5000)
    assert store.status().dedup == {"mode": "exact", "entries": 5000}


def test_a_700_page_crawl_completes_through_a_filter_planned_for_40(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a filter planned for 40 URLs (error 1e-9, so that no page is skipped by chance):
    # its layers hold 40, 40, 60, 90, 135, 203, 304, so 700 pages need a seventh layer
    web = site(700)
    settings = {"CLUSTERSYNC_BLOOM_CAPACITY": "40", "CLUSTERSYNC_BLOOM_ERROR_RATE": "1e-9",
                "CONCURRENT_REQUESTS": "32"}
    # when two nodes crawl a 700-page site
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, settings)
    wait_all(nodes, timeout_s=300)
    # then the filter grew, and every page was fetched exactly once
    dedup = JobStore(make_client(redis_server.url), "site", "t").status().dedup
    assert dedup["layers"] == 7 and dedup["entries"] == 700
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}


@pytest.mark.parametrize("classic", [False, True], ids=["blocked", "classic"])
def test_a_very_low_error_rate_holds_in_small_layers_too(
    redis_server: RedisServer, classic: bool
) -> None:
    # the hashes that place a fingerprint's bits leave fewer choices the smaller the layer
    # (classic: two hashes alone would collide on every bit modulo a small layer's size, about
    # one false positive per 9,000 lookups here, simulated; blocked: every bit within one block
    # of a few dozen, the bits of an arithmetic sequence in it gave one here): with several
    # layers of 50 to 800 URLs, still none
    store, epoch = bloom_store(redis_server.url, capacity=50, error=1e-9, classic=classic)
    insert(store, epoch, random_fingerprints(1_000, seed=7))
    assert store.status().dedup["layers"] == (5 if classic else 7)
    assert insert(store, epoch, random_fingerprints(20_000, seed=8)) == (20_000, 0)


def test_a_filter_grown_past_20_times_its_plan_keeps_the_configured_error_rate(
    redis_server: RedisServer,
) -> None:
    # given a filter planned for 500 URLs at 1%, grown to 21 times that (seven layers)
    store, epoch = bloom_store(redis_server.url, capacity=500, error=0.01)
    known = random_fingerprints(10_500, seed=20)
    pushed, _ = insert(store, epoch, known)
    dedup = store.status().dedup
    assert dedup["layers"] == 7
    # when 40,000 fresh URLs are checked against it as it stands
    wrong = false_positives(store, epoch, random_fingerprints(40_000, seed=21), window=100)
    # then at most 1% of them are taken for seen, as the model of its layers expects (about
    # 270 expected: the bound is over eight standard deviations away), and every URL that went
    # in is still seen
    assert wrong / 40_000 <= 0.01
    assert abs(wrong - 40_000 * dedup["expected_error_rate"]) <= 5 * (40_000 * 0.007) ** 0.5
    assert insert(store, epoch, known) == (0, 10_500) and pushed == dedup["entries"]


def load_classic_job(client: redis.Redis) -> None:
    """The dedup record of a classic Bloom job, as an earlier version wrote it, into job "job"
    (tests/data/classic_bloom_job.json says how it was made)."""
    record = json.loads((Path(__file__).parent / "data" / "classic_bloom_job.json").read_text())
    keys = JobKeys("job")
    client.hset(keys.meta, mapping=record["meta"])
    client.hset(keys.bloom, mapping=record["bloom"])
    for name, bits in record["chunks"].items():
        index, chunk = name.split(":")
        client.set(keys.bloom_chunk(int(index), int(chunk)), base64.b64decode(bits))


def test_a_classic_filter_written_by_an_earlier_version_is_read_and_grows_on(
    redis_server: RedisServer,
) -> None:
    # given the three classic layers (and a fourth allocated ahead) that an earlier version
    # wrote for 700 URLs, planned for 100 at 0.1%
    client = make_client(redis_server.url)
    load_classic_job(client)
    rng = random.Random(42)
    written = [rng.randbytes(20) for _ in range(700)]
    # when a node of this version joins, whatever its own settings
    store = JobStore(client, "job", "n1", DedupSettings("bloom", 5000, 0.01))
    epoch = store.join(ttl_ms=60_000)[0]
    # then it adopts the job's plan and layout, and every URL written before is still seen
    dedup = store.status().dedup
    assert (dedup["layout"], dedup["layers"], dedup["capacity"]) == ("classic", 3, 100)
    assert insert(store, epoch, written) == (0, 700)
    # and when 2,300 more URLs go in, the filter grows on in the classic layout, taking the
    # layer allocated ahead into use: every URL is seen, and fresh ones within the error rate
    more = random_fingerprints(2_300, seed=22)
    pushed, _ = insert(store, epoch, more)
    assert pushed >= 2_295 and insert(store, epoch, written + more) == (0, 3_000)
    params = BloomParams(100, 0.001, blocked=False)
    dedup = store.status().dedup
    assert dedup["layers"] == layers_for(params, 700 + pushed) == 5
    for index in range(dedup["layers"]):
        stored = BloomLayout.parse(client.hget(store.keys.bloom, f"layout{index}") or b"")
        assert stored == BloomLayout.of(layer(params, index))
    wrong = false_positives(store, epoch, random_fingerprints(20_000, seed=23), window=100)
    assert wrong / 20_000 <= 2 * 0.001



# ---- layers are allocated ahead of need, one chunk per call, never inside a flush ---------------
BLOOM = JobKeys("job").bloom


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def with_first_layer_holding(url: str, capacity: int, entries: int) -> tuple[JobStore, str]:
    """A Bloom job whose first layer holds ``entries`` (so its counter says), the node told so.

    Filling a layer of millions for real would take minutes; which bits are set does not matter
    to when the next layer is allocated. The node learns the fill from its next flush.
    """
    store, epoch = bloom_store(url, capacity=capacity, error=0.001)
    insert(store, epoch, random_fingerprints(10, seed=99))
    store.client.hset(BLOOM, "count0", entries)
    store.flush(epoch, [], new_call_id())
    return store, epoch


def prepare_ahead(store: JobStore, epoch: str) -> list[int]:
    """Run prepare_bloom until nothing is left, as the node's Redis thread does between calls;
    return how much Redis memory each call took."""
    grown, more = [], True
    while more:
        before = used_memory(store.client)
        more = store.prepare_bloom(epoch)
        grown.append(used_memory(store.client) - before)
    return grown


def test_a_flush_that_starts_a_new_layer_allocates_none_of_it(redis_server: RedisServer) -> None:
    # given a filter planned for 2M URLs (its second layer is 6 MB) whose first layer is 95% full
    store, epoch = with_first_layer_holding(redis_server.url, 2_000_000, entries=1_900_000)
    second = layer(BloomParams(2_000_000, 0.001), 1)
    # when the node prepares ahead, then sends a batch that crosses into the second layer
    grown = prepare_ahead(store, epoch)
    store.client.hset(BLOOM, "count0", 2_000_000 - 50)
    before = used_memory(store.client)
    result = store.flush(epoch, push_ops(random_fingerprints(100, seed=11)), new_call_id())
    # then the layer was allocated one chunk per call, and the flush only took it into use
    assert len(grown) == second.chunks and max(grown) <= second.chunk_bytes + 16_384
    assert (result.pushed, result.bloom_layers) == (100, 2)
    assert used_memory(store.client) - before < second.bytes / 20


def test_growing_the_filter_never_blocks_redis_for_long(redis_factory: RedisFactory) -> None:
    # given a Redis that times every command, and a filter planned for 20M URLs (layers of 45
    # and 57 MB) whose first layer is full, and that no node prepared ahead
    redis = redis_factory(extra_args=["--slowlog-log-slower-than", "0",
                                      "--slowlog-max-len", "100000"])
    store, epoch = with_first_layer_holding(redis.url, 20_000_000, entries=20_000_000 - 5)
    second = layer(BloomParams(20_000_000, 0.001), 1)
    # when a batch crosses into the second layer
    result = store.flush(epoch, push_ops(random_fingerprints(10, seed=12)), new_call_id())
    slowest = max(entry["duration"] for entry in store.client.slowlog_get(100_000))
    # then the layer was allocated, and no command took a third of the time that allocating
    # it in one command takes (measured here, on this machine, after the fact)
    assert (result.pushed, result.bloom_layers) == (10, 2)
    store.client.slowlog_reset()
    store.client.setrange("one-command", second.bytes - 1, b"\0")
    at_once = store.client.slowlog_get(1)[0]["duration"]
    assert slowest < at_once / 3, (slowest, at_once)


def test_a_layer_past_maxmemory_is_refused_and_the_batch_applies_later_once(
    redis_factory: RedisFactory,
) -> None:
    # given a Redis limited to 8 MB, and a filter whose first layer (4.5 MB) is full, so that the
    # next batch needs its second layer (6 MB)
    redis = redis_factory(extra_args=["--maxmemory", "8mb"])
    store, epoch = with_first_layer_holding(redis.url, 2_000_000, entries=2_000_000 - 50)
    second = layer(BloomParams(2_000_000, 0.001), 1)
    ops, call_id = push_ops(random_fingerprints(100, seed=13)), new_call_id()
    queued = store.status().queued
    # when that batch is flushed
    with pytest.raises(StoreError) as refused:
        store.flush(epoch, ops, call_id)
    # then Redis refused the layer with a clear error, kept to maxmemory within one chunk,
    # and nothing of the batch was applied
    assert "OOM" in str(refused.value) and "Bloom layer 1" in str(refused.value)
    assert used_memory(store.client) <= 8 * 2**20 + second.chunk_bytes + 16_384
    assert store.status().queued == queued and store.client.hget(BLOOM, "count0") == b"1999950"
    # and once Redis has room, the same call applies the whole batch, once
    store.client.config_set("maxmemory", 0)
    result = store.flush(epoch, ops, call_id)
    assert (result.pushed, result.bloom_layers) == (100, 2)
    assert store.flush(epoch, ops, call_id) == result and store.status().queued == queued + 100


def test_layers_prepared_ahead_keep_every_count_and_filter_every_known_url(
    redis_server: RedisServer,
) -> None:
    # given a filter planned for 100 URLs at 1e-9 (so that no new URL is skipped by chance)
    store, epoch = bloom_store(redis_server.url, capacity=100, error=1e-9)
    urls = random_fingerprints(2_000, seed=14)
    # when 2,000 URLs go in, 20 per flush, the node preparing ahead between flushes
    pushed = 0
    for start in range(0, len(urls), 20):
        pushed += store.flush(epoch, push_ops(urls[start:start + 20]), new_call_id()).pushed
        prepare_ahead(store, epoch)
    # then every URL was queued and counted once, through five layers or more, and known URLs
    # are all filtered
    dedup = store.status().dedup
    assert pushed == dedup["entries"] == 2_000 and dedup["layers"] >= 5
    assert insert(store, epoch, urls) == (0, 2_000)


def chunks_of(client: redis.Redis, index: int) -> list[bytes | None]:
    shape = layer(BloomParams(1000, 1e-9), index)
    chunks = [client.get(JobKeys("job").bloom_chunk(index, c)) for c in range(shape.chunks)]
    return cast("list[bytes | None]", chunks)  # make_client's replies are raw bytes


def push_and_prepare(
    url: str, urls: list[bytes], node: str, start: threading.Barrier, errors: list[Exception]
) -> None:
    try:
        store, epoch = bloom_store(url, capacity=1000, error=1e-9, node=node)
        start.wait()
        for first in range(0, len(urls), 100):
            store.flush(epoch, push_ops(urls[first:first + 100]), new_call_id())
            while store.prepare_bloom(epoch):
                pass
    except Exception as exc:  # the test asserts there was none
        errors.append(exc)


def test_two_nodes_allocating_the_same_layers_at_once_leave_every_chunk_whole(
    redis_server: RedisServer,
) -> None:
    # given two nodes of a filter planned for 1,000 URLs, with 2,500 of their 5,000 URLs in common
    urls = random_fingerprints(7500, seed=15)
    start = threading.Barrier(2)
    errors: list[Exception] = []
    nodes = [threading.Thread(target=push_and_prepare,
                              args=(redis_server.url, part, name, start, errors))
             for name, part in (("a", urls[:5000]), ("b", urls[2500:]))]
    # when both push at the same time, both allocating the layers they need as they go
    for node in nodes:
        node.start()
    for node in nodes:
        node.join(120)
    assert errors == []
    # then every chunk of every layer exists at its exact size, and each URL was counted once
    store, epoch = bloom_store(redis_server.url, capacity=1000, error=1e-9)
    dedup = store.status().dedup
    assert dedup["entries"] == 7500 and dedup["layers"] >= 4
    for index in range(dedup["layers"]):
        shape = layer(BloomParams(1000, 1e-9), index)
        assert [len(c or b"") for c in chunks_of(store.client, index)] == \
            [shape.chunk_bytes] * shape.chunks
    assert insert(store, epoch, urls) == (0, 7500)


def test_a_node_behind_on_a_layer_never_rewrites_it_once_it_is_in_use(
    redis_server: RedisServer,
) -> None:
    # given node b, which saw the second layer due, and node a, which then allocated it, took it
    # into use and set bits in it
    a, epoch = bloom_store(redis_server.url, capacity=1000, error=1e-9, node="a")
    b, _ = bloom_store(redis_server.url, capacity=1000, error=1e-9, node="b")
    insert(a, epoch, random_fingerprints(950, seed=16))
    b.flush(epoch, [], new_call_id())
    known = random_fingerprints(500, seed=17)
    insert(a, epoch, known)
    in_use = chunks_of(a.client, 1)
    # when b catches up on its preparation
    prepare_ahead(b, epoch)
    # then the layer is byte for byte as it was, and every URL a pushed is still filtered
    assert chunks_of(a.client, 1) == in_use and any(c.strip(b"\0") for c in in_use if c)
    assert insert(a, epoch, known) == (0, 500)


def test_preparing_a_layer_leaves_a_chunk_that_already_exists_untouched(
    redis_server: RedisServer,
) -> None:
    # given a chunk of the second layer that exists and holds bits though the job's record says
    # none of that layer is allocated (a lost record, or a node of another version)
    store, epoch = bloom_store(redis_server.url, capacity=1000, error=1e-9)
    insert(store, epoch, random_fingerprints(950, seed=18))
    shape = layer(BloomParams(1000, 1e-9), 1)
    chunk = JobKeys("job").bloom_chunk(1, 0)
    store.client.setbit(chunk, shape.chunk_bits - 1, 1)  # the byte SETRANGE would zero
    store.client.setbit(chunk, 3, 1)
    before = store.client.get(chunk)
    # when the node allocates that layer
    prepare_ahead(store, epoch)
    # then that chunk is unchanged, and the others exist at their exact size
    assert store.client.get(chunk) == before
    assert [len(c or b"") for c in chunks_of(store.client, 1)] == [shape.chunk_bytes] * shape.chunks


def test_purge_deletes_layers_prepared_ahead_and_status_counts_them_apart(
    redis_server: RedisServer,
) -> None:
    # given a job whose second layer was allocated ahead of need
    store, epoch = bloom_store(redis_server.url, capacity=1000, error=0.001)
    insert(store, epoch, random_fingerprints(950, seed=19))
    prepare_ahead(store, epoch)
    # then status counts the layer in use as the filter's bytes, and the other one apart
    dedup = store.status().dedup
    params = BloomParams(1000, 0.001)
    assert (dedup["layers"], dedup["bytes"], dedup["prepared_bytes"]) == (
        1, layer(params, 0).bytes, layer(params, 1).bytes)
    # and purge leaves no chunk behind
    store.purge()
    assert store.client.keys("*bloom*") == []


def test_restart_forgetting_the_seen_record_deletes_every_layer_in_one_step(
    redis_server: RedisServer,
) -> None:
    # given a finished-looking job (no node alive, nothing queued) whose filter grew two layers
    store, epoch = bloom_store(redis_server.url, capacity=500, error=0.001)
    known = random_fingerprints(3000, seed=11)
    insert(store, epoch, known)
    client = make_client(redis_server.url)
    prefix = store.keys.bloom
    assert len([k for k in client.scan_iter(f"{prefix}*")]) > 2  # the hash and its chunks
    client.delete(store.keys.queue, store.keys.nodes)
    # when the bloom hash changes between reading it and restarting (a node still writing)
    stale = DedupRecord.read(client, store.keys)
    existing = client.exists(*stale.keys)
    client.hset(store.keys.bloom, "layout9", "changed")
    answer = RestartScript(client, store.keys).run(force=False, record=stale)
    # then the script does nothing and says to read it again
    assert answer is None
    assert client.exists(*stale.keys) == existing > 100
    client.hdel(store.keys.bloom, "layout9")
    # when it is restarted, forgetting the seen record
    result = store.restart(forget_seen=True)
    # then every key of the dedup record is gone and every URL is new again
    assert result.done
    assert [k for k in client.scan_iter(f"{prefix}*")] == []
    assert client.exists(store.keys.seen) == 0
    assert insert(store, epoch, known[:500]) == (500, 0)
