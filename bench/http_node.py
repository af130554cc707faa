"""One node over HTTP (through `clustersync serve`) against one node on Redis, on the bench site.

    python bench/http_node.py [--pages 2000] [--repeat 3] [--workers 1]

The bench project's spider (bench/benchproj, the example project's `site`) crawls the whole
generated site with one scrapy-clustersync node, either with ``CLUSTERSYNC_REDIS_URL`` (the
run's own redis-server) or with ``CLUSTERSYNC_URL`` (a ``clustersync serve`` of ``--workers``
processes on that redis-server, on the same machine, with a token). The rounds are interleaved;
the medians of the steady pages/s (10th to 90th percentile of the page hits) are compared,
and the CPU per page of the node and serve (on a busy machine a steadier figure than pages/s).
Target: the node over HTTP >= 0.8 of the node on Redis.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# testkit and the tests' serve helper are not installed: imported from the repository
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from api_serve import ServeProcess  # noqa: E402
from runner import BENCH_DIR, EXAMPLE_PROJECT, steady_rate  # noqa: E402

from testkit.nodes import start_node, wait_or_kill  # noqa: E402
from testkit.redis_server import RedisServer  # noqa: E402
from testkit.site_process import SiteProcess  # noqa: E402

CAP_S = 300.0
TARGET = 0.8
VARIANTS = ("redis", "http")


def add_token(redis_url: str) -> str:
    """A new operator token's secret (``clustersync token add``)."""
    made = subprocess.run([sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url",
                           redis_url, "token", "add", "bench", "--role", "operator"],
                          capture_output=True, text=True, check=True)
    return next(word for word in made.stdout.split() if word.startswith("csk_"))


def children_cpu_s() -> float:
    """User + system CPU seconds of the child processes reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(variant: str, site: SiteProcess, run_dir: Path,
             workers: int) -> tuple[float, float, float]:
    """One node of ``variant`` crawls the site; its steady pages/s, and the CPU seconds the
    node and serve used."""
    agent = f"bench/{variant}-{time.monotonic_ns()}"
    run_dir.mkdir(parents=True)
    redis = RedisServer(run_dir / "redis").start()
    serve = None
    try:
        settings = {"USER_AGENT": agent, "LOG_LEVEL": "WARNING"}
        if variant == "http":
            serve = ServeProcess(redis.url, run_dir, "--workers", str(workers)).wait_ready()
            settings.update(CLUSTERSYNC_REDIS_URL="", CLUSTERSYNC_URL=serve.base_url,
                            CLUSTERSYNC_TOKEN=add_token(redis.url))
        else:
            settings["CLUSTERSYNC_REDIS_URL"] = redis.url
        cpu_before = children_cpu_s()
        node = start_node("site", cwd=run_dir, log_path=run_dir / "scrapy.log",
                          spider_args={"start_url": site.start_url}, settings=settings,
                          env={"SCRAPY_SETTINGS_MODULE": "benchproj.settings_clustersync"},
                          pythonpath=[BENCH_DIR, EXAMPLE_PROJECT])
        wait_or_kill(node, CAP_S)
        node_cpu_s = children_cpu_s() - cpu_before  # (serve and Redis are not reaped yet)
    finally:
        if serve is not None:
            serve.stop()
        serve_cpu_s = children_cpu_s() - cpu_before - node_cpu_s
        redis.stop()
    hits = site.agent_hits(agent)
    if len(hits.hits) != site.pages:
        sys.exit(f"{variant}: fetched {len(hits.hits)} of {site.pages} pages; "
                 f"see {run_dir / 'scrapy.log'}")
    return steady_rate(hits.times), node_cpu_s, serve_cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="serve's worker processes")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    cpu: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="http-node-") as tmp, SiteProcess(args.pages) as site:
        for repeat in range(args.repeat):
            for variant in VARIANTS:
                rate, node_s, serve_s = run_once(variant, site, Path(tmp) / f"{variant}-{repeat}",
                                                 args.workers)
                rates[variant].append(rate)
                cpu[variant].append((node_s + serve_s) * 1000 / args.pages)
                print(f"  {variant:<6} round {repeat + 1}: {rate:7.1f} pages/s, CPU per page: "
                      f"node {node_s * 1000 / args.pages:.2f} ms, serve "
                      f"{serve_s * 1000 / args.pages:.2f} ms", flush=True)
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    ratio = medians["http"] / medians["redis"] if medians["redis"] else 0.0
    print(f"\none node, {args.pages} pages, serve with {args.workers} worker(s), medians of "
          f"{args.repeat}: redis {medians['redis']:.1f} pages/s, http {medians['http']:.1f} "
          f"pages/s")
    print(f"http ÷ redis: {ratio:.2f} (target >= {TARGET}: "
          f"{'ok' if ratio >= TARGET else 'BELOW TARGET'})")
    print(f"CPU per page (node + serve), medians: redis {statistics.median(cpu['redis']):.2f} "
          f"ms, http {statistics.median(cpu['http']):.2f} ms")


if __name__ == "__main__":
    main()
