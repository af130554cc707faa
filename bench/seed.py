"""``clustersync seed JOB -f FILE`` of 100,000 URLs into its own redis-server: URLs/s.

    python bench/seed.py [--urls 100000] [--queued 10000000] [--cache DIR] [--repeat 3]

Runs the real command (a subprocess, start-up included) with Scrapy's default fingerprinter
and the default Bloom dedup, then checks that every URL is queued. ``--queued N`` seeds into a
job that already holds N other requests over 10,000 sites (its Bloom filter and frontier as
large as they get in a big crawl): that job is seeded once, with the same command, and kept as
a Redis snapshot in ``--cache`` (default: the system's temporary directory), which every later
run loads into a fresh redis-server; each measured seed starts from that snapshot. Target:
>= 100,000 URLs/s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

TARGET_URLS_PER_S = 100_000
JOB = "bench"
#: the pre-filled job's URLs: this many sites, seeded this many per command
PREFILL_SITES = 10_000
PREFILL_PER_COMMAND = 1_000_000
#: the default CLUSTERSYNC_BLOOM_ERROR_RATE
BLOOM_ERROR_RATE = 0.001
#: loading a snapshot of ten million requests takes a while
SNAPSHOT_LOAD_TIMEOUT_S = 600.0


def seed_command(url: str, urls: Path) -> list[str]:
    return [sys.executable, "-m", "scrapy_clustersync.cli.app", "--redis-url", url,
            "seed", JOB, "--create", "-f", str(urls)]


def run_seed(url: str, urls: Path, cwd: Path) -> float:
    """Seconds the seed command took, start-up included (exits if it failed)."""
    began = time.perf_counter()
    done = subprocess.run(seed_command(url, urls), capture_output=True, text=True, cwd=cwd)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"seed failed: {done.stderr}")
    return elapsed


def prefilled_snapshot(queued: int, cache: Path) -> Path:
    """The snapshot (dump.rdb) of a job holding ``queued`` requests, made once into ``cache``."""
    snapshot = cache / f"seed-bench-{queued}.rdb"
    if snapshot.exists():
        return snapshot
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp, RedisServer(Path(tmp) / "redis") as server:
        began = time.perf_counter()
        urls = Path(tmp) / "prefill.txt"
        for first in range(0, queued, PREFILL_PER_COMMAND):
            last = min(first + PREFILL_PER_COMMAND, queued)
            with urls.open("w") as out:
                out.writelines(f"https://site{n % PREFILL_SITES}.example.com/p/{n}.html\n"
                               for n in range(first, last))
            run_seed(server.url, urls, Path(tmp))
            print(f"  pre-filled {last:,} of {queued:,} ({time.perf_counter() - began:.0f} s)",
                  file=sys.stderr)
        client = make_client(server.url)
        client.save()
        shutil.move(str(Path(tmp) / "redis" / "dump.rdb"), snapshot)
    return snapshot


def measure(count: int, snapshot: Path | None) -> tuple[float, int]:
    """(seconds, requests the seed queued) of one seed of ``count`` new URLs."""
    with tempfile.TemporaryDirectory() as tmp:
        urls = Path(tmp) / "urls.txt"
        urls.write_text("".join(f"https://shop{i % 50}.example.com/item/{i}?ref=seed\n"
                                for i in range(count)))
        server = RedisServer(Path(tmp) / "redis")
        if snapshot is not None:
            server.directory.mkdir(parents=True)
            shutil.copy(snapshot, server.directory / "dump.rdb")
        server.start(timeout_s=SNAPSHOT_LOAD_TIMEOUT_S)
        try:
            store = JobStore(make_client(server.url), JOB, "bench")
            before = store.status().queued if snapshot is not None else 0
            elapsed = run_seed(server.url, urls, Path(tmp))
            return elapsed, store.status().queued - before
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=0,
                        help="requests the job holds before the seed (default 0: a new job)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the pre-filled job's snapshot is kept")
    parser.add_argument("--repeat", type=int, default=1, help="runs (their median is reported)")
    args = parser.parse_args()
    count = args.urls
    snapshot = prefilled_snapshot(args.queued, args.cache) if args.queued else None
    # a new job's first fingerprints are kept exactly; a big job's Bloom filter takes a new URL
    # for a seen one at most at the configured error rate (CLUSTERSYNC_BLOOM_ERROR_RATE)
    most_lost = int(count * BLOOM_ERROR_RATE) if args.queued else 0
    rates, lost = [], []
    for _ in range(args.repeat):
        elapsed, queued = measure(count, snapshot)
        rates.append(count / elapsed)
        lost.append(count - queued)
    rate = statistics.median(rates)
    verdict = "ok" if rate >= TARGET_URLS_PER_S else "BELOW TARGET"
    if max(lost) > most_lost:
        verdict = "NOT ALL QUEUED"
    into = f"a job of {args.queued:,} queued" if args.queued else "a new job"
    each = ", ".join(f"{r:,.0f}" for r in rates)
    print(f"seed: {count:,} URLs from a file into {into}: median {rate:,.0f} URLs/s over "
          f"{len(rates)} run(s) ({each}; whole command, start-up included; target >= "
          f"{TARGET_URLS_PER_S:,}); taken for seen: {', '.join(map(str, lost))} (at most "
          f"{most_lost:,}): {verdict}")


if __name__ == "__main__":
    main()
