"""How long `clustersync serve` takes to answer on a big job.

    python bench/serve_latency.py [--queued 1000000] [--sites 10000] [--requests 300]

Fills a job on its own redis-server with ``--queued`` URL-only requests over ``--sites`` sites
(``clustersync seed``), starts ``clustersync serve`` on a free port, and sends each endpoint
``--requests`` GETs, one at a time, after one to warm it up. Prints p50, p99 and the slowest
answer of each, in ms, as a client on the same machine sees them (docs/api.md has a run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# testkit and the tests' serve helper are not installed: imported from the repository
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from api_serve import ServeProcess  # noqa: E402

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
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as directory:
        workdir = Path(directory)
        server = RedisServer(workdir).start()
        try:
            took = seed(server, workdir, args.queued, args.sites)
            print(f"seeded {args.queued:,} requests over {args.sites:,} sites in {took:.0f} s")
            with ServeProcess(server.url, workdir) as serve:
                for path in ENDPOINTS:
                    times = timed(serve, path, args.requests)
                    print(f"{path:28} p50 {percentile(times, 0.5) * 1000:6.1f} ms   "
                          f"p99 {percentile(times, 0.99) * 1000:6.1f} ms   "
                          f"max {max(times) * 1000:6.1f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
