"""``clustersync seed JOB -f FILE`` of 100,000 URLs into its own redis-server: URLs/s.

    python bench/seed.py [--urls 100000] [--queued 10000000] [--cache DIR] [--repeat 3]

Runs the real command (a subprocess, start-up included) with Scrapy's default fingerprinter
and the default Bloom dedup, then checks that every URL is queued, and prints the URLs/s and
the Redis time per URL (the scripts' time by INFO commandstats). ``--queued N`` also seeds
into a job that already holds N other requests over 10,000 sites (its Bloom filter and
frontier as large as they get in a big crawl), in rounds alternating with the new job's, and
prints both: that job is seeded once, with the same command (not timed), and kept as a Redis
snapshot in ``--cache`` (default: the system's temporary directory), which every later run
loads into a fresh redis-server; each measured seed starts from that snapshot. Target:
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
from dataclasses import dataclass
from pathlib import Path

import redis

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


@dataclass
class Seeded:
    """One measured seed: seconds, requests it queued, Redis µs in scripts."""

    seconds: float
    queued: int
    script_us: float


def script_us(client: redis.Redis) -> float:
    """Microseconds Redis spent in script calls since its stats were last reset."""
    stats = client.info("commandstats")
    return float(sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0)
                     for name in ("eval", "evalsha", "fcall")))


def measure(count: int, snapshot: Path | None) -> Seeded:
    """One seed of ``count`` new URLs into a new job, or the snapshot's."""
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
            client = make_client(server.url)
            store = JobStore(client, JOB, "bench")
            before = store.status().queued if snapshot is not None else 0
            client.config_resetstat()
            elapsed = run_seed(server.url, urls, Path(tmp))
            return Seeded(elapsed, store.status().queued - before, script_us(client))
        finally:
            server.stop()


def summary(count: int, queued: int, runs: list[Seeded]) -> str:
    """The line of one kind of job: median rate, Redis µs per URL, URLs taken for seen."""
    # a new job's first fingerprints are kept exactly; a big job's Bloom filter takes a new URL
    # for a seen one at most at the configured error rate (CLUSTERSYNC_BLOOM_ERROR_RATE)
    most_lost = int(count * BLOOM_ERROR_RATE) if queued else 0
    rates = [count / run.seconds for run in runs]
    lost = [count - run.queued for run in runs]
    rate = statistics.median(rates)
    redis_us = statistics.median(run.script_us / count for run in runs)
    verdict = "ok" if rate >= TARGET_URLS_PER_S else "BELOW TARGET"
    if max(lost) > most_lost:
        verdict = "NOT ALL QUEUED"
    into = f"a job of {queued:,} queued" if queued else "a new job"
    each = ", ".join(f"{r:,.0f}" for r in rates)
    return (f"seed: {count:,} URLs from a file into {into}: median {rate:,.0f} URLs/s over "
            f"{len(rates)} run(s) ({each}; whole command, start-up included; target >= "
            f"{TARGET_URLS_PER_S:,}); Redis {redis_us:.2f} us per URL in scripts; taken for "
            f"seen: {', '.join(map(str, lost))} (at most {most_lost:,}): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=0,
                        help="also seed into a job holding this many requests (default 0: "
                             "only a new job); e.g. 10000000")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the pre-filled job's snapshot is kept")
    parser.add_argument("--repeat", type=int, default=1, help="runs (their median is reported)")
    args = parser.parse_args()
    snapshot = prefilled_snapshot(args.queued, args.cache) if args.queued else None
    kinds: list[tuple[int, Path | None]] = [(0, None)]
    if snapshot is not None:
        kinds.append((args.queued, snapshot))
    runs: dict[int, list[Seeded]] = {queued: [] for queued, _ in kinds}
    for _ in range(args.repeat):  # rounds alternate, so both kinds see the same machine
        for queued, source in kinds:
            runs[queued].append(measure(args.urls, source))
    for queued, _ in kinds:
        print(summary(args.urls, queued, runs[queued]))


if __name__ == "__main__":
    main()
