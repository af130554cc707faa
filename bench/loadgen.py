"""Load generator: what N crawling nodes send Redis, without downloading anything.

    python bench/loadgen.py [--queued 1000000] [--sites 10000] [--nodes 3] [--seconds 20]
                            [--batch 16] [--new-links 1] [--dup-links 1]

Fills a job on its own redis-server with ``--queued`` URL-only requests over ``--sites`` sites
(with ``clustersync seed``, start-up included; its rate is printed too), then runs ``--nodes``
node processes for ``--seconds``. Each loops as a fast node's Redis thread does: it leases a
batch of ``--batch`` requests, then sends one flush with the acks of that batch and the pushes
of the links their pages yielded (``--new-links`` new URLs per page and ``--dup-links`` URLs
already seen, which the job's dedup filters), and a heartbeat a second renewing what it holds.

It reports the pages (acks) per second the nodes got through, the Redis CPU per page (the CPU
of redis-server's main thread, which runs every command) and the pages per second one Redis
core would carry at that cost, the p50 and p99 of each script's run time in Redis (from Redis's
slow log, told to record every call; the nodes' own timings, with their client and the busy
cores in them, are printed beside), and the calls of 10 ms or more.
The figure of merit is the pages/s per Redis core; the nodes here are Python processes on the
same cores, so the pages/s they reach themselves says more about them than about Redis.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy import Request
from scrapy.utils.request import fingerprint

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DEFAULTS
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.flush_script import FlushScript
from scrapy_clustersync.store.heartbeat_script import HeartbeatScript
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.lease_script import LeaseScript
from scrapy_clustersync.store.records import as_text
from scrapy_clustersync.store.script_base import load_lua
from scrapy_clustersync.store.write_ops import Ack, Op, Push
from testkit.rates import percentile
from testkit.redis_server import RedisServer

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "loadgen.json"
JOB = "loadgen"
TARGET_PAGES_PER_CORE = 50_000
#: what a queued URL-only request may cost Redis, everything of the queue included
TARGET_BYTES_PER_REQUEST = 150
SLOW_MS = 10
#: how long the nodes run again with every command logged, for each script's run time
LATENCY_RUN_S = 3.0
#: the commands Redis's slow log keeps meanwhile (those the scripts run included)
CALLS_KEPT = 1_000_000
SCRIPTS = {hashlib.sha1(load_lua(script.FILE, *script.HELPERS).encode()).hexdigest(): script.FILE
           for script in (FlushScript, LeaseScript, HeartbeatScript)}
TTL_MS = 30_000
LEASE_MS = 60_000


@dataclass
class NodeFigures:
    """What one node process did and how long each of its calls took (seconds)."""

    pages: int = 0
    pushes: int = 0
    calls: dict[str, list[float]] = field(default_factory=dict)

    def timed(self, kind: str, began: float) -> None:
        self.calls.setdefault(kind, []).append(time.perf_counter() - began)


def site_url(number: int, sites: int, tag: str = "p") -> str:
    """A URL of one of ``sites`` hosts, distinct for each ``number`` (and ``tag``)."""
    return f"https://site{number % sites}.example.com/{tag}/{number}.html"


def site_of(url: str) -> str:
    """The site a node pushes ``url`` to: its host (Scrapy's download slot key)."""
    return urlsplit(url).hostname or ""


def queue_bytes(client: Any) -> dict[str, int]:
    """The bytes the job's keys take (MEMORY USAGE, every element counted): the queue's (the
    frontier's lists and sets and the meta hash), the dedup record's, and all of them."""
    keys = JobKeys(JOB)
    names = [as_text(name) for name in client.scan_iter(match=f"clustersync:{{{JOB}}}:*",
                                                         count=10_000)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)
    sizes = dict(zip(names, pipe.execute(), strict=True))
    queue = sum(size for name, size in sizes.items()
                if name.startswith(keys.frontier) or name in (keys.meta, keys.queue))
    dedup = sum(size for name, size in sizes.items()
                if name == keys.seen or name.startswith(keys.bloom))
    return {"queue": queue, "dedup": dedup, "all": sum(sizes.values())}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queued", type=int, default=1_000_000,
                        help="requests queued before the nodes start (default 1,000,000)")
    parser.add_argument("--sites", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=16, help="requests per lease")
    parser.add_argument("--new-links", type=int, default=1, help="new URLs per page")
    parser.add_argument("--dup-links", type=int, default=1,
                        help="URLs already seen per page, sent to Redis (filtered there)")
    return parser.parse_args(argv)


def fill(server: RedisServer, queued: int, sites: int, workdir: Path) -> float:
    """Seed ``queued`` URLs with the real command; returns its URLs/s, start-up included."""
    urls = workdir / "urls.txt"
    with urls.open("w") as out:
        out.writelines(site_url(n, sites) + "\n" for n in range(queued))
    command = [sys.executable, "-m", "scrapy_clustersync.cli.app", "--redis-url", server.url,
               "seed", JOB, "--create", "-f", str(urls)]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"seed failed: {done.stderr}")
    urls.unlink()
    return queued / elapsed


def run_node(url: str, name: str, args: argparse.Namespace, until: float,
             out: multiprocessing.Queue[dict[str, Any]]) -> None:
    """One simulated node ``name`` (a process of its own), looping until ``until``
    (time.time()); the new URLs it pushes are its own (its name is in them)."""
    store = JobStore(make_client(url), JOB, name)
    epoch = store.join_node(TTL_MS, claim=False, recrawl="join").epoch
    encode = RequestCodec(None, int(DEFAULTS["CLUSTERSYNC_MAX_REQUEST_BYTES"])).url_encoder(
        Request("https://example.com/"), callback="parse")
    figures = NodeFigures()
    fresh = 0  # this node's new URLs so far
    next_beat = 0.0
    while time.time() < until:
        began = time.perf_counter()
        leased = store.lease(epoch, args.batch, LEASE_MS, uuid.uuid4().hex)
        figures.timed("lease", began)
        if time.monotonic() >= next_beat:
            began = time.perf_counter()
            store.heartbeat(epoch, ttl_ms=TTL_MS, lease_ms=LEASE_MS, info={}, idle=False,
                            idle_after_ms=0, lease_ids=[each.entry_id for each in leased])
            figures.timed("heartbeat", began)
            next_beat = time.monotonic() + 1.0
        ops: list[Op] = []
        for each in leased:
            for _ in range(args.new_links):
                link = site_url(fresh, args.sites, name)
                fresh += 1
                ops.append(Push(fingerprint(Request(link)), 0, encode(link), 0, site_of(link)))
            for dup in range(args.dup_links):  # a URL of the seeded queue: seen
                link = site_url((fresh * 7 + dup) % args.queued, args.sites)
                ops.append(Push(fingerprint(Request(link)), 0, encode(link), 0, site_of(link)))
            ops.append(Ack(each.entry_id))
        if ops:
            began = time.perf_counter()
            store.flush(epoch, ops, uuid.uuid4().hex)
            figures.timed("flush", began)
        figures.pages += len(leased)
        figures.pushes += len(leased) * (args.new_links + args.dup_links)
    out.put(asdict(figures))


def redis_main_cpu_s(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def spread(calls: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Count, p50, p99 and max (ms) of each kind's call times (s)."""
    return {kind: {"count": len(times), "p50_ms": round(statistics.median(times) * 1000, 3),
                   "p99_ms": round(percentile(times, 0.99) * 1000, 3),
                   "max_ms": round(max(times) * 1000, 3)}
            for kind, times in sorted(calls.items()) if times}


def run_nodes(server: RedisServer, args: argparse.Namespace, seconds: float, run: str
              ) -> tuple[list[dict[str, Any]], float]:
    """Run the node processes of ``run`` for ``seconds``; their figures and how long they ran."""
    results: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    until = time.time() + seconds
    nodes = [multiprocessing.Process(target=run_node,
                                     args=(server.url, f"{run}-{i}", args, until, results))
             for i in range(args.nodes)]
    began = time.perf_counter()
    for node in nodes:
        node.start()
    figures = [results.get(timeout=seconds + 120) for _ in nodes]
    elapsed = time.perf_counter() - began
    for node in nodes:
        node.join()
    return figures, elapsed


def script_times(logged: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The run time (s) of each script call in a slow log that recorded every command (the
    commands a script runs are logged too, apart: they are left out here)."""
    times: dict[str, list[float]] = {}
    for entry in logged:
        command = entry["command"]
        words = (command.decode(errors="replace") if isinstance(command, bytes)
                 else str(command)).split()
        if len(words) > 1 and words[0].upper() in ("EVALSHA", "EVAL"):
            times.setdefault(SCRIPTS.get(words[1], "other"), []).append(entry["duration"] / 1e6)
    return times


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        client = server.client()
        seed_rate = fill(server, args.queued, args.sites, Path(tmp))
        used_memory = int(client.info("memory")["used_memory"])
        sizes = queue_bytes(client)
        # the throughput: the slow log keeps only the calls of SLOW_MS or more
        client.config_set("slowlog-log-slower-than", SLOW_MS * 1000)
        client.slowlog_reset()
        cpu_before = redis_main_cpu_s(client)
        figures, elapsed = run_nodes(server, args, args.seconds, "load")
        redis_cpu_s = redis_main_cpu_s(client) - cpu_before
        slow = client.slowlog_get(128)
        # each script's run time: a short run with every command logged (which costs Redis
        # some CPU, hence apart)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", CALLS_KEPT)
        client.slowlog_reset()
        timed_figures, _ = run_nodes(server, args, LATENCY_RUN_S, "timed")
        in_redis = script_times(client.slowlog_get(CALLS_KEPT))
        queued_after = JobStore(client, JOB, "loadgen").status().queued
    pages = sum(each["pages"] for each in figures)
    calls: dict[str, list[float]] = {}
    for each in figures + timed_figures:
        for kind, times in each["calls"].items():
            calls.setdefault(kind, []).extend(times)
    cpu_ms_per_page = redis_cpu_s * 1000 / pages if pages else float("inf")
    per_core = pages / redis_cpu_s if redis_cpu_s else 0.0
    report = {
        "queued_before": args.queued, "queued_after": queued_after, "sites": args.sites,
        "nodes": args.nodes, "batch": args.batch, "new_links": args.new_links,
        "dup_links": args.dup_links, "seconds": round(elapsed, 2), "pages": pages,
        "pages_per_s": round(pages / elapsed, 1), "redis_cpu_s": round(redis_cpu_s, 3),
        "redis_cpu_ms_per_page": round(cpu_ms_per_page, 4),
        "pages_per_s_per_redis_core": round(per_core), "seed_urls_per_s": round(seed_rate),
        "redis_used_memory_bytes": used_memory,
        "bytes_per_queued_request": {kind: round(size / args.queued, 1)
                                     for kind, size in sizes.items()},
        "in_redis": spread(in_redis), "as_the_nodes_timed_them": spread(calls),
        "slowlog": [{"ms": entry["duration"] / 1000, "command": str(entry["command"])[:80]}
                    for entry in slow],
    }
    RESULTS_PATH.parent.mkdir(exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")
    print(f"loadgen: {args.nodes} nodes for {elapsed:.1f} s on a job of {args.queued:,} queued "
          f"requests over {args.sites:,} sites (seeded at {seed_rate:,.0f} URLs/s)")
    print(f"  {pages:,} pages = {pages / elapsed:,.0f} pages/s; Redis CPU {cpu_ms_per_page:.4f} "
          f"ms/page = {per_core:,.0f} pages/s per Redis core "
          f"(target >= {TARGET_PAGES_PER_CORE:,})")
    per = report["bytes_per_queued_request"]
    print(f"  bytes per queued request: {per['queue']:.1f} in the queue "
          f"(target <= {TARGET_BYTES_PER_REQUEST}), {per['dedup']:.1f} in the dedup record, "
          f"{per['all']:.1f} in all the job's keys")
    timed = report["as_the_nodes_timed_them"]
    for kind, figure in report["in_redis"].items():
        node = timed.get(kind, {})
        print(f"  {kind:<9} in Redis: {figure['count']:>6} calls  p50 {figure['p50_ms']:.2f} ms  "
              f"p99 {figure['p99_ms']:.2f} ms  max {figure['max_ms']:.2f} ms   (as a node timed "
              f"it: p99 {node.get('p99_ms', 0):.2f} ms)")
    print(f"  calls of {SLOW_MS} ms or more in Redis: {len(slow)}"
          + (f", slowest {max(e['duration'] for e in slow) / 1000:.1f} ms" if slow else ""))
    print(f"results: {RESULTS_PATH}")


if __name__ == "__main__":
    main()
