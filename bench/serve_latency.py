"""How long `clustersync serve` takes to answer on a big job.

    python bench/serve_latency.py [--queued 1000000] [--sites 10000] [--nodes 20]
                                  [--requests 300]

Fills a job on its own redis-server with ``--queued`` URL-only requests over ``--sites`` sites
(``clustersync seed``) and has ``--nodes`` nodes join it, each holding ``--leases`` leases and
sending a heartbeat with a full node record (CPU, memory, pages, the busiest sites it paces) every
second while the endpoints are timed, as crawling nodes do. Then starts ``clustersync serve`` on
a free port and sends each endpoint ``--requests`` GETs, one at a time, after one to warm it up.
Prints p50, p99 and the slowest answer of each, in ms, as a client on the same machine sees them
(docs/api.md has a run).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# testkit and the tests' serve helper are not installed: imported from the repository
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from api_serve import ServeProcess  # noqa: E402

from scrapy_clustersync.store.client import make_client  # noqa: E402
from scrapy_clustersync.store.job_store import JobStore  # noqa: E402
from scrapy_clustersync.store.script_base import new_call_id  # noqa: E402
from testkit.rates import percentile  # noqa: E402
from testkit.redis_server import RedisServer  # noqa: E402

JOB = "big"
ENDPOINTS = (f"/api/jobs/{JOB}", f"/api/jobs/{JOB}/nodes", f"/api/jobs/{JOB}/sites",
             "/api/jobs", "/metrics")


def seed(server: RedisServer, workdir: Path, queued: int, sites: int) -> float:
    """Seed the job; the seconds it took."""
    urls = workdir / "urls.txt"
    with urls.open("w") as out:
        for i in range(queued):
            out.write(f"https://site{i % sites}.example/page{i}\n")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url", server.url,
                    "seed", JOB, "-f", str(urls), "--create"], check=True, cwd=workdir,
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - started


class Nodes:
    """``count`` nodes of the job, each holding ``leases`` leases, heart-beating every second
    from a process of their own (so that the timing client here never waits for them) until
    the block ends."""

    BEAT_MS = 1000
    TTL_MS = 600_000

    def __init__(self, url: str, count: int, leases: int) -> None:
        self.stores: list[tuple[JobStore, str, list[str]]] = []
        for number in range(count):
            store = JobStore(make_client(url), JOB, f"bench-node-{number}")
            epoch, _ = store.join(ttl_ms=self.TTL_MS)
            held = [entry.entry_id for entry in store.lease(epoch, leases, self.TTL_MS,
                                                            new_call_id())]
            self.stores.append((store, epoch, held))
        self.pages = 0
        self._stop = multiprocessing.Event()
        self._process = multiprocessing.Process(target=self._beat_all, daemon=True)

    def __enter__(self) -> Nodes:
        self._beat_once()
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._process.join()

    def record(self, number: int, held: int) -> dict[str, Any]:
        """A node record with every field a crawling node's heartbeat sends."""
        now = time.time()
        return {
            "node": f"bench-node-{number}", "host": socket.gethostname(), "ip": "127.0.0.1",
            "pid": os.getpid(), "spider": "bench", "runs_start": number == 0,
            "concurrency": 16, "settings_version": None, "state": "crawling",
            "started": now - 600, "updated": now, "pages": self.pages, "items": self.pages,
            "errors": number, "pages_per_min": 600.0 + number, "unserializable": 0,
            "inflight": 16, "rss_bytes": 120_000_000 + number, "cpu_percent": 35.0,
            "load_avg": [1.0, 1.0, 1.0], "leased": held, "prefetched": 8, "buffered": 0,
            "sites": {f"site{n}.example": {"delay_s": 0.5, "inflight": 2}
                      for n in range(number, number + 20)},
        }

    def _beat_once(self) -> None:
        self.pages += 10
        for number, (store, epoch, held) in enumerate(self.stores):
            store.heartbeat(epoch, ttl_ms=self.TTL_MS, lease_ms=self.TTL_MS,
                            info=self.record(number, len(held)), idle=False, idle_after_ms=0,
                            lease_ids=held)

    def _beat_all(self) -> None:
        while not self._stop.wait(self.BEAT_MS / 1000):
            self._beat_once()


def timed(serve: ServeProcess, path: str, requests: int) -> list[float]:
    """Seconds each of ``requests`` GETs of ``path`` took."""
    serve.http.get(path)
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = serve.http.get(path)
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--sites", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=20, help="nodes in the job")
    parser.add_argument("--leases", type=int, default=100, help="leases each node holds")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as directory:
        workdir = Path(directory)
        server = RedisServer(workdir).start()
        try:
            took = seed(server, workdir, args.queued, args.sites)
            print(f"seeded {args.queued:,} requests over {args.sites:,} sites in {took:.0f} s")
            with Nodes(server.url, args.nodes, args.leases), \
                    ServeProcess(server.url, workdir) as serve:
                print(f"{args.nodes} nodes heart-beating every second, "
                      f"{args.leases} leases each")
                for path in ENDPOINTS:
                    times = timed(serve, path, args.requests)
                    print(f"{path:28} p50 {percentile(times, 0.5) * 1000:6.1f} ms   "
                          f"p99 {percentile(times, 0.99) * 1000:6.1f} ms   "
                          f"max {max(times) * 1000:6.1f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
