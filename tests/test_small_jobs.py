"""Small jobs stay small: an exact set of fingerprints until the job needs its Bloom filter, then
every fingerprint moved into the filter in bounded steps, none lost (store/bloom_layout.py,
store/lua/dedup_migrate.lua).
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import redis

from scrapy_clustersync.config import ConfigError, DedupSettings
from scrapy_clustersync.store import JobStore, Push, StoreError, make_client
from scrapy_clustersync.store.bloom_layout import MIGRATE_BATCH, BloomParams, set_limit
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.keys import JobKeys
from testkit.redis_server import RedisServer

from conftest import RedisFactory, SiteFactory
from support import missing_pages, pages_fetched_twice, start_nodes, wait_all

KEYS = JobKeys("job")


def job_memory(client: redis.Redis, job: str = "job") -> int:
    """Bytes Redis holds for every key of the job (MEMORY USAGE, summed)."""
    return sum(client.memory_usage(key, samples=0) or 0
               for key in client.scan_iter(f"clustersync:{{{job}}}:*"))


def fingerprints(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(20) for _ in range(count)]


def push(store: JobStore, epoch: str, fps: list[bytes], batch: int = 500) -> tuple[int, int]:
    """Push every fingerprint; return (pushed, filtered)."""
    pushed = filtered = 0
    for start in range(0, len(fps), batch):
        ops = [Push(fp, 0, b"") for fp in fps[start:start + batch]]
        result = store.flush(epoch, ops, new_call_id())
        pushed, filtered = pushed + result.pushed, filtered + result.filtered
    return pushed, filtered


def upkeep(store: JobStore, epoch: str) -> int:
    """Run the node's Bloom upkeep until nothing is due; return how many calls it took."""
    calls = 1
    while store.prepare_bloom(epoch):
        calls += 1
    return calls


def store_for(url: str, settings: DedupSettings, node: str = "n1") -> tuple[JobStore, str]:
    store = JobStore(make_client(url), "job", node, settings)
    return store, store.join(ttl_ms=60_000)[0]


def test_a_new_job_with_10_urls_uses_under_1_mb_of_redis(redis_server: RedisServer) -> None:
    # given a job with the default dedup settings (a filter planned for 10M URLs, 22 MB)
    store, epoch = store_for(redis_server.url, DedupSettings())
    # when 10 URLs are pushed and the node keeps its filter up
    assert push(store, epoch, fingerprints(10, seed=1)) == (10, 0)
    upkeep(store, epoch)
    # then the job holds a few kB, no Bloom layer, and still knows its 10 URLs
    assert job_memory(store.client) < 1_000_000
    assert not list(store.client.scan_iter("clustersync:{job}:bloom:*"))
    assert push(store, epoch, fingerprints(10, seed=1)) == (0, 10)
    assert store.status().dedup["stage"] == "exact set"


def test_a_job_past_the_set_limit_moves_every_fingerprint_into_the_filter(
    redis_server: RedisServer,
) -> None:
    # given a job whose set hands over to the filter at 2,955 fingerprints
    settings = DedupSettings("bloom", 100_000, 0.001)
    store, epoch = store_for(redis_server.url, settings)
    known = fingerprints(10_000, seed=2)
    # when 10,000 URLs are pushed, the node's upkeep running between batches
    for start in range(0, len(known), 1000):
        push(store, epoch, known[start:start + 1000])
        store.prepare_bloom(epoch)
    upkeep(store, epoch)
    # then the set is empty, every known URL is still seen, and fresh ones are new at the rate
    dedup = store.status().dedup
    assert (dedup["stage"], dedup["exact_entries"], dedup["entries"]) == ("filter", 0, 10_000)
    assert push(store, epoch, known) == (0, 10_000)
    _, wrong = push(store, epoch, fingerprints(20_000, seed=3))
    assert wrong / 20_000 <= 1.2 * 0.001
    assert not store.client.exists(KEYS.seen)


def test_pushes_of_two_nodes_during_the_move_never_let_a_duplicate_through(
    redis_server: RedisServer,
) -> None:
    # given a job whose set is full (error 1e-9: no new URL is wrongly seen) and its filter in use
    settings = DedupSettings("bloom", 20_000, 1e-9)
    first, epoch = store_for(redis_server.url, settings, "n1")
    second, _ = store_for(redis_server.url, settings, "n2")
    early = fingerprints(set_limit(BloomParams(20_000, 1e-9)) + 600, seed=4)
    push(first, epoch, early)
    assert first.status().dedup["stage"] == "moving to the filter"
    # when two nodes push the same early and new URLs in their own order while a third moves
    later = fingerprints(6000, seed=5)
    mover, _ = store_for(redis_server.url, settings, "n3")
    mover.flush(epoch, [], new_call_id())

    def push_all(store: JobStore, seed: int) -> None:
        mixed = early + later
        random.Random(seed).shuffle(mixed)
        push(store, epoch, mixed, batch=100)

    threads = [threading.Thread(target=push_all, args=(s, n)) for n, s in ((6, first),
                                                                           (7, second))]
    for thread in threads:
        thread.start()
    while mover.prepare_bloom(epoch):
        pass
    for thread in threads:
        thread.join(120)
    upkeep(mover, epoch)
    # then each URL is queued exactly once, and the set is empty
    assert first.client.zcard(KEYS.queue) == len(early) + len(later)
    assert first.status().dedup["exact_entries"] == 0


def test_no_call_of_the_move_touches_more_than_a_batch_or_blocks_redis_for_long(
    redis_factory: RedisFactory,
) -> None:
    # given a job with the default settings whose set is past its limit (100,000)
    redis = redis_factory(extra_args=["--slowlog-log-slower-than", "0",
                                      "--slowlog-max-len", "100000"])
    store, epoch = store_for(redis.url, DedupSettings())
    push(store, epoch, fingerprints(100_500, seed=8), batch=2000)
    # when the node's upkeep moves the set into the filter
    store.client.slowlog_reset()
    sizes = [store.client.scard(KEYS.seen)]
    while store.prepare_bloom(epoch):
        sizes.append(store.client.scard(KEYS.seen))
    # then each call moved at most a batch, and none took long
    steps = [a - b for a, b in zip(sizes, sizes[1:], strict=False)]
    assert steps and max(steps) <= MIGRATE_BATCH and store.client.scard(KEYS.seen) == 0
    slowest_us = max(entry["duration"] for entry in store.client.slowlog_get(100_000))
    print(f"slowest call while moving: {slowest_us / 1000:.1f} ms")
    assert slowest_us < 500_000  # about 10 ms on an idle machine


def test_a_job_that_stores_a_dedup_mode_this_version_does_not_write_is_not_joined(
    redis_server: RedisServer,
) -> None:
    # given a job whose meta names a dedup mode no version of the package writes ("bloom": a
    # filter from the first URL, a format of a development version that was never released)
    client = make_client(redis_server.url)
    client.hset(KEYS.meta, mapping={"epoch": "e1", "dedup": "bloom",
                                    "bloom_capacity": 1000, "bloom_error": "0.001"})
    # when a node joins it, then it is refused with the way out, and writes no fingerprint
    with pytest.raises(StoreError, match="records its fingerprints as 'bloom'.*purge"):
        store_for(redis_server.url, DedupSettings())
    assert not client.exists(KEYS.seen) and not client.exists(KEYS.bloom)


def test_a_node_asked_to_join_a_job_it_cannot_read_stops_with_a_clear_error_and_exit_code(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job "site" whose meta names a dedup mode this version does not read
    web = site(5)
    client = make_client(redis_server.url)
    client.hset("clustersync:{site}:meta", mapping={
        "epoch": "e1", "dedup": "bloom", "bloom_capacity": 1000, "bloom_error": "0.001"})
    # when a node is started on it
    node = start_nodes(1, redis_server.url, web.start_url, tmp_path)[0]
    code = node.wait(60)
    # then it fetches nothing and stops non-zero, saying what the job holds and how to go on,
    # not that Redis is unreachable
    assert code != 0 and pages_fetched_twice(web) == {} and len(missing_pages(web)) == 5
    assert node.finish_reason() == "clustersync_job_unreadable"
    assert "records its fingerprints as 'bloom'" in node.log() and "purge" in node.log()
    assert "reachable" not in node.log()


def test_an_older_node_refuses_a_job_that_starts_with_a_set(redis_server: RedisServer) -> None:
    # given a job created by this version
    store, _ = store_for(redis_server.url, DedupSettings())
    stored = store.client.hget(KEYS.meta, "dedup")
    # then its stored mode is one that older nodes refuse at their join: the versions before
    # the exact set took it for a setting (they never consult the set), those before the
    # blocked layout read only their own two modes (they would read its layers wrong); while
    # this version reads it as the "bloom" setting
    assert stored == b"set-then-blocked-bloom" and store.dedup.mode == "bloom"
    with pytest.raises(ConfigError, match="is not a dedup mode"):
        DedupSettings(stored.decode())
    assert stored.decode() not in ("exact", "set-then-bloom")


def test_exact_dedup_stays_exact_forever(redis_server: RedisServer) -> None:
    store, epoch = store_for(redis_server.url, DedupSettings("exact"))
    push(store, epoch, fingerprints(5000, seed=10))
    upkeep(store, epoch)
    assert store.status().dedup == {"mode": "exact", "entries": 5000}
    assert not store.client.exists(KEYS.bloom)


def test_a_real_crawl_of_a_small_site_leaves_the_job_small(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a 50-page site and the default dedup settings
    web = site(50)
    # when two nodes crawl it
    wait_all(start_nodes(2, redis_server.url, web.start_url, tmp_path), timeout_s=120)
    # then every page was fetched once, and the job costs under 1 MB, no Bloom layer
    assert missing_pages(web) == [] and pages_fetched_twice(web) == {}
    client = make_client(redis_server.url)
    assert job_memory(client, "site") < 1_000_000
    assert not list(client.scan_iter("clustersync:{site}:bloom:*"))
