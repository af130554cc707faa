"""Dedup memory and false positives: this project's Bloom filter beside scrapy-redis's set and
scrapy-redis-bloomfilter's bitmap, each in its own redis-server started here.

    python bench/bloom.py [--urls 1000000]

Inserts N fingerprints (Scrapy's 20-byte request fingerprints of distinct URLs) into each,
measures the bytes Redis holds for them (MEMORY USAGE of the dedup keys), then checks N fresh
fingerprints and counts how many are wrongly reported as seen. A Bloom job starts with an exact
set; the bench runs the node's upkeep (``prepare_bloom``) until the set has moved into the filter,
and counts what is left of both.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, Push, make_client
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

ERROR_RATE = 0.001
THEORY_BITS = -math.log(ERROR_RATE) / math.log(2) ** 2
BATCH = 2000
RESULTS = Path(__file__).parent / "results"


def fingerprints(count: int, offset: int) -> list[bytes]:
    fingerprinter = RequestFingerprinter()
    return [fingerprinter.fingerprint(Request(f"http://shop.example/item/{i}"))
            for i in range(offset, offset + count)]


def memory_of(client: redis.Redis, pattern: str) -> int:
    return sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(pattern))


def ours(url: str, inserts: list[bytes], fresh: list[bytes]) -> dict[str, Any]:
    client = make_client(url)
    store = JobStore(client, "bench", "bench", DedupSettings("bloom", len(inserts), ERROR_RATE))
    epoch = store.join(ttl_ms=600_000)[0]
    started = time.perf_counter()
    for start in range(0, len(inserts), BATCH):
        store.flush(epoch, [Push(fp, 0, b"") for fp in inserts[start:start + BATCH]],
                    new_call_id())
    while store.prepare_bloom(epoch):  # the node's upkeep: the exact set moves into the filter
        pass
    seconds = time.perf_counter() - started
    # the layers in use and what is left of the set; not the next layer, allocated ahead of need
    layers = store.status().dedup["layers"]
    memory = sum(memory_of(client, f"clustersync:{{bench}}:bloom:{i}:*") for i in range(layers))
    memory += memory_of(client, "clustersync:{bench}:bloom") + memory_of(
        client, "clustersync:{bench}:seen")
    wrong = 0
    for start in range(0, len(fresh), BATCH):
        # a fresh fingerprint reported as seen is filtered: that is a false positive
        result = store.flush(epoch, [Push(fp, 0, b"") for fp in fresh[start:start + BATCH]],
                             new_call_id())
        wrong += result.filtered
    return {"name": "scrapy-clustersync bloom", "bytes": memory, "false_positives": wrong,
            "insert_s": seconds}


def ours_exact(url: str, inserts: list[bytes], fresh: list[bytes]) -> dict[str, Any]:
    client = make_client(url)
    store = JobStore(client, "bench", "bench", DedupSettings("exact"))
    epoch = store.join(ttl_ms=600_000)[0]
    for start in range(0, len(inserts), BATCH):
        store.flush(epoch, [Push(fp, 0, b"") for fp in inserts[start:start + BATCH]],
                    new_call_id())
    memory = memory_of(client, "clustersync:{bench}:seen")
    return {"name": "scrapy-clustersync exact", "bytes": memory, "false_positives": 0,
            "insert_s": None}


def scrapy_redis_set(url: str, inserts: list[bytes], fresh: list[bytes]) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    for start in range(0, len(inserts), BATCH):  # scrapy-redis SADDs the hex fingerprint
        client.sadd("bench:dupefilter", *(fp.hex() for fp in inserts[start:start + BATCH]))
    return {"name": "scrapy-redis set", "bytes": memory_of(client, "bench:dupefilter"),
            "false_positives": 0, "insert_s": None}


def _srbf_offsets(hex_fingerprints: list[str]) -> list[list[int]]:
    from scrapy_redis_bloomfilter.bloomfilter import BloomFilter

    maps = BloomFilter(None, "x").maps  # its defaults: 2**30 bits, 6 hash functions
    return [[m.hash(value) for m in maps] for value in hex_fingerprints]


def _offsets_in_parallel(fps: list[bytes]) -> list[list[int]]:
    values = [fp.hex() for fp in fps]
    parts = [values[i::2] for i in range(2)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        halves = pool.map(_srbf_offsets, parts)
    merged: list[list[int]] = []
    for pair in zip(*halves, strict=False):
        merged.extend(pair)
    if len(halves[0]) > len(halves[1]):
        merged.append(halves[0][-1])
    return merged


def scrapy_redis_bloomfilter(url: str, inserts: list[bytes], fresh: list[bytes]) -> dict[str, Any]:
    """Its own hash functions and bit layout; SETBIT/GETBIT pipelined to spare the wall time."""
    client = redis.Redis.from_url(url)
    key = "bench:bloomfilter"
    for offsets in _chunks(_offsets_in_parallel(inserts), BATCH):
        pipe = client.pipeline(transaction=False)
        for each in offsets:
            for offset in each:
                pipe.setbit(key, offset, 1)
        pipe.execute()
    memory = memory_of(client, key)
    wrong = 0
    for offsets in _chunks(_offsets_in_parallel(fresh), BATCH):
        pipe = client.pipeline(transaction=False)
        for each in offsets:
            for offset in each:
                pipe.getbit(key, offset)
        bits = pipe.execute()
        wrong += sum(all(bits[i:i + 6]) for i in range(0, len(bits), 6))
    return {"name": "scrapy-redis-bloomfilter 0.8.1 (defaults)", "bytes": memory,
            "false_positives": wrong, "insert_s": None}


def _chunks(items: list[list[int]], size: int) -> list[list[list[int]]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--urls", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.urls
    print(f"fingerprinting {2 * n:,} URLs ...", flush=True)
    inserts, fresh = fingerprints(n, 0), fingerprints(n, n)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in (("ours", ours), ("exact", ours_exact), ("set", scrapy_redis_set),
                          ("srbf", scrapy_redis_bloomfilter)):
            with RedisServer(Path(tmp) / name) as server:
                print(f"running {name} ...", flush=True)
                rows.append(run(server.url, inserts, fresh))
    print(f"\n{n:,} URLs inserted, {n:,} fresh URLs checked; theory at {ERROR_RATE:.1%}: "
          f"{THEORY_BITS:.2f} bits per URL\n")
    print("| dedup | bytes per URL | x theoretical minimum | false-positive rate "
          "| x configured 0.1% |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        per_url = row["bytes"] / n
        rate = row["false_positives"] / n
        row.update(bytes_per_url=per_url, x_min=per_url * 8 / THEORY_BITS, fp_rate=rate)
        print(f"| {row['name']} | {per_url:.2f} | {row['x_min']:.2f} | {rate:.5f} "
              f"| {rate / ERROR_RATE:.2f} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bloom.json").write_text(json.dumps({"urls": n, "rows": rows}, indent=2))
    ok = rows[0]["x_min"] <= 1.1 and rows[0]["fp_rate"] <= 1.2 * ERROR_RATE
    print(f"\ntargets (<= 1.1x minimum, <= 1.2x configured error): {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
    sys.exit(main())
