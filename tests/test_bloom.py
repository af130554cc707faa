"""The Bloom filter dedup: memory near the minimum, growth past capacity, atomic across nodes."""

from __future__ import annotations

import math
import multiprocessing
import random
from pathlib import Path

import pytest
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.bloom import BloomParams, expected_error, layer
from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.job import new_call_id

from conftest import RedisFactory, SiteFactory
from support import missing_pages, pages_fetched_twice, start_nodes, wait_all

THEORETICAL_BITS_AT_0_1_PERCENT = -math.log(0.001) / math.log(2) ** 2  # 14.38


def bloom_store(url: str, capacity: int, error: float, node: str = "n1") -> tuple[JobStore, str]:
    store = JobStore(make_client(url), "job", node, DedupSettings("bloom", capacity, error))
    return store, store.join(ttl_ms=60_000)[0]


def insert(store: JobStore, epoch: str, fingerprints: list[bytes]) -> tuple[int, int]:
    """Push every fingerprint; return (pushed, filtered)."""
    pushed = filtered = 0
    for start in range(0, len(fingerprints), 500):
        ops = [("P", fp, 0, b"", 0) for fp in fingerprints[start:start + 500]]
        result = store.flush(epoch, ops, new_call_id())
        pushed, filtered = pushed + result.pushed, filtered + result.filtered
    return pushed, filtered


def random_fingerprints(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(20) for _ in range(count)]


@pytest.mark.parametrize("capacity", [10_000, 1_000_000, 10_000_000, 10**10])
def test_layer_zero_costs_under_1_1_times_the_minimum(capacity: int) -> None:
    first = layer(BloomParams(capacity, 0.001), 0)
    assert first.bits / capacity <= 1.1 * THEORETICAL_BITS_AT_0_1_PERCENT
    assert first.false_positive_rate(capacity) <= first.error_rate
    assert first.chunk_bytes < 512 * 2**20  # Redis's string limit


def test_layers_keep_the_summed_error_within_the_configured_rate() -> None:
    params = BloomParams(1000, 0.001)
    full = [layer(params, i).capacity for i in range(12)]
    assert expected_error(params, full) <= 0.001


def test_the_filter_grows_past_its_capacity_and_stays_within_its_error_rate(
    redis_server: RedisFactory,
) -> None:
    # given a filter planned for 1,000 URLs at 1%
    store, epoch = bloom_store(redis_server.url, capacity=1000, error=0.01)
    # when 20,000 distinct URLs go in
    insert(store, epoch, random_fingerprints(20_000, seed=1))
    # then it grew several layers, and fresh URLs are wrongly "seen" at most 1.2x the rate
    assert store.status().dedup["layers"] >= 4
    _, false_positives = insert(store, epoch, random_fingerprints(50_000, seed=2))
    assert false_positives / 50_000 <= 1.2 * 0.01


def test_known_urls_are_always_filtered(redis_server: RedisFactory) -> None:
    store, epoch = bloom_store(redis_server.url, capacity=500, error=0.001)
    known = random_fingerprints(3000, seed=3)
    insert(store, epoch, known)
    assert insert(store, epoch, known) == (0, 3000)  # no false negatives, across layers


def push_same_urls(url: str, seed: int) -> None:
    store, epoch = bloom_store(url, capacity=1000, error=1e-9, node=f"p{seed}")
    codec, fingerprinter = RequestCodec(None, 1 << 16), RequestFingerprinter()
    urls = [f"http://site/{i}" for i in range(10_000)]
    random.Random(seed).shuffle(urls)
    for start in range(0, len(urls), 200):
        requests = [Request(u) for u in urls[start:start + 200]]
        ops = [("P", fingerprinter.fingerprint(r), 0, codec.encode(r), 0) for r in requests]
        store.flush(epoch, ops, new_call_id())


def test_two_processes_pushing_the_same_10000_urls_queue_each_exactly_once(
    redis_server: RedisFactory,
) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=push_same_urls, args=(redis_server.url, seed))
               for seed in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    store, epoch = bloom_store(redis_server.url, capacity=1000, error=1e-9)
    codec = RequestCodec(None, 1 << 16)
    queued = [codec.decode(blob).url for _, blob in store.lease(epoch, 20_000, 60_000, "x")]
    assert len(queued) == 10_000 and len(set(queued)) == 10_000


def test_the_filter_survives_a_redis_restart_with_persistence(redis_factory: RedisFactory) -> None:
    redis = redis_factory(persistence=True)
    store, epoch = bloom_store(redis.url, capacity=1000, error=0.001)
    known = random_fingerprints(3000, seed=4)
    insert(store, epoch, known)
    redis.restart()
    store, epoch = bloom_store(redis.url, capacity=1000, error=0.001)
    assert insert(store, epoch, known) == (0, 3000)
    assert insert(store, epoch, random_fingerprints(100, seed=5))[0] >= 99


def test_the_jobs_own_dedup_settings_win_over_a_late_nodes(redis_server: RedisFactory) -> None:
    first, _ = bloom_store(redis_server.url, capacity=1000, error=0.001)
    late = JobStore(make_client(redis_server.url), "job", "n2", DedupSettings("exact"))
    late.join(ttl_ms=1000)
    assert late.dedup == first.dedup == DedupSettings("bloom", 1000, 0.001)


def test_exact_dedup_never_skips_a_new_url(redis_server: RedisFactory) -> None:
    store = JobStore(make_client(redis_server.url), "job", "n1", DedupSettings("exact"))
    epoch = store.join(ttl_ms=1000)[0]
    fingerprints = random_fingerprints(5000, seed=6)
    assert insert(store, epoch, fingerprints) == (5000, 0)
    assert insert(store, epoch, fingerprints) == (0, 5000)
    assert store.status().dedup == {"mode": "exact", "entries": 5000}


def test_a_20000_page_crawl_completes_through_a_filter_planned_for_1000(
    redis_server: RedisFactory, site: SiteFactory, tmp_path: Path
) -> None:
    # given a filter planned for 1,000 URLs (error 1e-9, so that no page is skipped by chance)
    web = site(20_000)
    settings = {"CLUSTERSYNC_BLOOM_CAPACITY": "1000", "CLUSTERSYNC_BLOOM_ERROR_RATE": "1e-9",
                "CONCURRENT_REQUESTS": "32"}
    # when two nodes crawl a 20,000-page site
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, settings)
    wait_all(nodes, timeout_s=400)
    # then the filter grew, and every page was fetched exactly once
    dedup = JobStore(make_client(redis_server.url), "site", "t").status().dedup
    assert dedup["layers"] >= 5 and dedup["entries"] == 20_000
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}


def test_a_very_low_error_rate_holds_in_small_layers_too(redis_server: RedisFactory) -> None:
    # with two hashes only, fingerprints agreeing on both modulo a small layer's size collide on
    # every bit: about one false positive per 200,000 lookups here instead of none
    store, epoch = bloom_store(redis_server.url, capacity=1000, error=1e-9)
    insert(store, epoch, random_fingerprints(20_000, seed=7))
    assert insert(store, epoch, random_fingerprints(100_000, seed=8)) == (100_000, 0)
