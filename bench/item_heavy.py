"""Item-heavy pages: a listing spider, vanilla Scrapy and scrapy-clustersync side by side.

    python bench/item_heavy.py [--pages 600] [--repeat 3] [--items 120] [--delay 0.01]
                               [--baseline REV [REV ...]] [--only KEY ...]

Every page of a generated site is a listing: the spider (tests/projects/listing) yields
``--items`` items per page, each awaited ``--delay`` seconds by an async item pipeline (a
database write, say), then follows the page's links. One node of each variant crawls the whole
site; the rounds are interleaved and the medians of the steady pages/s (10th to 90th percentile
of the page hits) are compared with vanilla Scrapy's in the same run:

- ``vanilla`` and ``clustersync``: no feed, the add-on's result pipeline off;
- ``vanilla +feed`` (a JSON lines feed, ``-o items.jsonl``) and ``clustersync +results`` (the
  add-on's result pipeline writing every item to the job's result stream), when the installed
  package has the result pipeline.

Each run has its own redis-server. Targets: clustersync >= 0.95 of vanilla; with results
>= 0.90 of vanilla with a feed. ``--baseline REV`` also runs each clustersync variant with the
package as it was at git revision REV (bench/baseline.py), right after it in every round, and
prints its ratios too: an A/B run in one session (with several revisions, each; this code's own
commit among them compares code installed alike).
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from baseline import baseline_python
from runner import steady_rate

from scrapy_clustersync import config
from testkit.nodes import start_node, wait_or_kill
from testkit.redis_server import RedisServer
from testkit.site_process import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
LISTING_PROJECT = ROOT / "tests" / "projects" / "listing"
BENCH_DIR = Path(__file__).resolve().parent
CAP_S = 120.0
TARGET = 0.95
TARGET_WITH_RESULTS = 0.90


@dataclass(frozen=True)
class ListingVariant:
    """One way of running the listing spider: with or without the add-on, a feed, results."""
    key: str
    addon: bool
    feed: bool = False
    results: bool = False
    #: for an A/B run: the python of a virtualenv with an older version of the package
    python: str = ""


def variants(baseline: list[str] | None = None) -> list[ListingVariant]:
    """The variants of a round; with ``baseline``, each clustersync variant's twin at each of
    those git revisions right after it (keyed ``clustersync@<commit>``)."""
    chosen = [ListingVariant("vanilla", addon=False), ListingVariant("clustersync", addon=True)]
    if results_pipeline_available():
        chosen += [ListingVariant("vanilla +feed", addon=False, feed=True),
                   ListingVariant("clustersync +results", addon=True, results=True)]
    installed = [baseline_python(rev) for rev in baseline or []]
    with_twins = []
    for variant in chosen:
        with_twins.append(variant)
        if variant.addon:
            with_twins += [replace(variant, python=str(python),
                                   key=variant.key.replace("clustersync", f"clustersync@{commit}"))
                           for commit, python in installed]
    return with_twins


def results_pipeline_available() -> bool:
    return "CLUSTERSYNC_RESULTS" in config.DEFAULTS


def run_once(variant: ListingVariant, site: SiteProcess, run_dir: Path, args: argparse.Namespace,
             agent: str) -> tuple[float, float]:
    """One node of ``variant`` crawls the site; its steady pages/s and its CPU ms per page
    (user + system, start-up included)."""
    settings = {"USER_AGENT": agent, "ITEMS_PER_PAGE": str(args.items),
                "PIPELINE_DELAY": str(args.delay), "LOG_LEVEL": "WARNING"}
    options: list[str] = []
    if variant.feed:
        options = ["-o", str(run_dir / "items.jsonl")]
    redis = RedisServer(run_dir / "redis").start() if variant.addon else None
    try:
        if redis is not None:
            settings["CLUSTERSYNC_REDIS_URL"] = redis.url
            settings["CLUSTERSYNC_IDLE_CLOSE_AFTER"] = "1.0"
            if results_pipeline_available():
                settings["CLUSTERSYNC_RESULTS"] = str(variant.results)
        else:
            settings["ADDONS"] = "{}"
        node = start_node("listing", cwd=LISTING_PROJECT, log_path=run_dir / "scrapy.log",
                          spider_args={"start_url": site.start_url}, settings=settings,
                          options=options, env={"SCRAPY_SETTINGS_MODULE": "listing.settings"},
                          pythonpath=[LISTING_PROJECT],
                          python=Path(variant.python) if variant.python else None)
        cpu_before = _children_cpu_s()
        wait_or_kill(node, CAP_S)
        node_cpu_s = _children_cpu_s() - cpu_before  # redis-server is reaped after this
    finally:
        if redis is not None:
            redis.stop()
    hits = site.agent_hits(agent)
    if len(hits.hits) != site.pages:
        sys.exit(f"{variant.key}: fetched {len(hits.hits)} of {site.pages} pages; "
                 f"see {run_dir / 'scrapy.log'}")
    return steady_rate(hits.times), 1000 * node_cpu_s / site.pages


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--items", type=int, default=120)
    parser.add_argument("--delay", type=float, default=0.01)
    parser.add_argument("--baseline", metavar="REV", nargs="+",
                        help="also run the clustersync variants with the package at each of "
                        "these git revisions (installed in .bench-baseline/), in the same rounds")
    parser.add_argument("--only", nargs="+", metavar="KEY",
                        help="run only these variants (and the vanilla ones they are rated "
                        "against), e.g. 'clustersync +results'")
    args = parser.parse_args()
    wanted = set(args.only or ()) | {_base(key) for key in args.only or ()}
    chosen = [v for v in variants(args.baseline)
              if not wanted or re.sub(r"@\w+", "", v.key) in wanted]
    rates: dict[str, list[float]] = {v.key: [] for v in chosen}
    cpu: dict[str, list[float]] = {v.key: [] for v in chosen}
    with tempfile.TemporaryDirectory() as tmp, SiteProcess(args.pages) as site:
        for repeat in range(args.repeat):
            for variant in chosen:
                agent = f"bench/{variant.key.replace(' ', '_')}-{repeat}-{time.monotonic_ns()}"
                run_dir = Path(tmp) / agent.replace("/", "_")
                rate, cpu_ms = run_once(variant, site, run_dir, args, agent)
                rates[variant.key].append(rate)
                cpu[variant.key].append(cpu_ms)
                print(f"  {variant.key:<30} round {repeat + 1}: {rate:7.1f} pages/s, node CPU "
                      f"{cpu_ms:5.2f} ms/page", flush=True)
    medians = {key: statistics.median(values) for key, values in rates.items() if values}
    print(f"\nlisting: {args.items} items per page, async pipeline {args.delay * 1000:g} ms "
          f"per item, {args.pages} pages, medians of {args.repeat}")
    for key, value in medians.items():
        print(f"  {key:<30} {value:7.1f} pages/s, node CPU "
              f"{statistics.median(cpu[key]):5.2f} ms/page")
    for key in medians:
        base = _base(key)
        if key.startswith("clustersync") and base in medians:
            report(f"{key} ÷ {base}", medians[key], medians[base],
                   TARGET_WITH_RESULTS if key.endswith("+results") else TARGET,
                   [value / rate for value, rate in zip(rates[key], rates[base], strict=True)
                    if rate])


def _base(key: str) -> str:
    """The vanilla variant a variant is rated against."""
    return "vanilla +feed" if key.endswith("+results") else "vanilla"


def report(label: str, value: float, base: float, target: float,
           rounds: list[float]) -> None:
    ratio = value / base if base else 0.0
    verdict = "ok" if ratio >= target else "BELOW TARGET"
    each = ", ".join(f"{r:.2f}" for r in rounds)
    print(f"  {label}: {ratio:.2f} (target >= {target:.2f}): {verdict}; rounds {each}")


if __name__ == "__main__":
    main()
