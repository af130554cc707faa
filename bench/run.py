"""Benchmark: vanilla Scrapy, scrapy-redis 0.9.1 and scrapy-clustersync, side by side.

    python bench/run.py [--pages 3000] [--repeat 3] [--cap 60] [--quick] [--only KEY ...]
                        [--baseline REV [REV ...]]

Serves a generated site from its own process, crawls all of it with every variant (one node;
one vanilla node writing its items to a JSON lines feed, as a clustersync node writes them to
the job's results stream; two nodes; two nodes with 2.5 ms added each way between the nodes and
Redis; two clustersync nodes far from Redis, 25 and 50 ms each way), each run on its
own redis-server, repeats the whole round ``--repeat`` times interleaved, and prints the
medians, the headline ratios and a Markdown snippet for the README. Results go to
``bench/results/latest.json``. About 6 minutes with the defaults on 2 cores; ``--quick`` 2.
``--baseline REV`` also runs every clustersync variant with the package as it was at git
revision REV, in the same rounds, and prints the ratios of this code to that one.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polite
from baseline import baseline_python
from report import (
    Ratio,
    Summary,
    baseline_ratios,
    headline_ratios,
    markdown_snippet,
    summarize,
    write_json,
)
from runner import RunResult, Variant, run_variant

import scrapy_clustersync
from testkit.redis_server import redis_server_binary
from testkit.site_process import SiteProcess

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "latest.json"
DELAY_S = 0.0025
#: far nodes: 25 and 50 ms each way between the nodes and Redis (another region)
FAR_DELAYS_S = (0.025, 0.05)
VARIANTS = [
    Variant("vanilla", 1),
    # vanilla writing the spider's items (one per page) to a JSON lines feed, as clustersync x1
    # writes them to the job's results stream (on by default)
    Variant("vanilla", 1, feed=True),
    Variant("scrapy-redis", 1),
    Variant("clustersync", 1),
    Variant("scrapy-redis", 2),
    Variant("clustersync", 2),
    Variant("scrapy-redis", 2, DELAY_S),
    Variant("clustersync", 2, DELAY_S),
    *(Variant("clustersync", 2, delay_s) for delay_s in FAR_DELAYS_S),
    # the far nodes as a region of their own, with the site pinned to it (docs/operations.md)
    Variant("clustersync", 2, FAR_DELAYS_S[-1], region="far"),
]
DEFAULT_PAGES = 3000
QUICK_PAGES = 800
SHORT_CRAWL_PAGES = 2000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, help="pages of the site (default 3000; quick 800)")
    parser.add_argument("--repeat", type=int, help="runs per variant (default 3; quick 2)")
    parser.add_argument("--cap", type=float,
                        help="stop a run after this many seconds and rate the pages it fetched "
                        "(default 60; quick 20)")
    parser.add_argument("--quick", action="store_true",
                        help="800 pages, 2 runs per variant, 20 s cap: about 2 minutes")
    parser.add_argument("--only", nargs="+", metavar="KEY",
                        help="run only variants whose key contains one of these, e.g. 'x1'")
    parser.add_argument("--skip", nargs="+", metavar="KEY", default=[],
                        help="leave out variants whose key contains one of these")
    parser.add_argument("--no-count", action="store_true",
                        help="skip the untimed runs that count Redis commands with MONITOR")
    parser.add_argument("--baseline", metavar="REV", nargs="+",
                        help="also run the clustersync variants with the package at each of "
                        "these git revisions (installed in .bench-baseline/), in the same rounds")
    parser.add_argument("--keep", action="store_true", help="keep node logs and stats")
    parser.add_argument("--out", type=Path, default=RESULTS_PATH, help="where to write JSON")
    parser.add_argument("--polite", action="store_true",
                        help="run only the politeness variant (polite.py): 2 nodes, 20 sites at "
                             "DOWNLOAD_DELAY 0.1, the budget reached and any site's excess")
    polite.add_arguments(parser)
    args = parser.parse_args(argv)
    args.pages = args.pages or (QUICK_PAGES if args.quick else DEFAULT_PAGES)
    args.repeat = args.repeat or (2 if args.quick else 3)
    args.cap = args.cap or (20.0 if args.quick else 60.0)
    return args


def selected_variants(only: list[str] | None, baseline: str | list[str] | None = None,
                      skip: list[str] | None = None) -> list[Variant]:
    """The variants to run; with ``baseline`` (one git revision or several), each clustersync
    variant's twin at each revision runs right after it. Two revisions installed alike (this
    code's commit among them) compare code without the difference between a work tree and an
    installed package."""
    chosen = [v for v in VARIANTS if (not only or any(part in v.key for part in only))
              and not any(part in v.key for part in skip or [])]
    revisions = [baseline] if isinstance(baseline, str) else baseline or []
    installed = [baseline_python(rev) for rev in revisions]
    with_twins = []
    for variant in chosen:
        with_twins.append(variant)
        if variant.engine == "clustersync":
            with_twins += [replace(variant, baseline=commit, python=str(python))
                           for commit, python in installed]
    return with_twins


def run_rounds(
    variants: list[Variant], repeat: int, site: SiteProcess, workdir: Path, cap_s: float
) -> list[RunResult]:
    """Every variant once per round, ``repeat`` rounds, so slow drifts hit all variants alike."""
    results = []
    for round_no in range(repeat):
        for variant in variants:
            result = run_variant(variant, round_no, site, workdir, cap_s)
            results.append(result)
            print(_progress_line(result, f"{round_no + 1}/{repeat}"), flush=True)
    return results


def run_counting(
    variants: list[Variant], site: SiteProcess, workdir: Path, cap_s: float
) -> list[RunResult]:
    """One untimed run of each Redis variant without added delay, counting what nodes send."""
    results = []
    for variant in variants:
        if variant.uses_redis and not variant.delay_s:
            result = run_variant(variant, 0, site, workdir, cap_s, count_commands=True)
            results.append(result)
            print(_progress_line(result, "count"), flush=True)
    return results


def _progress_line(r: RunResult, step: str) -> str:
    counted = r.commands_per_page if r.counted else r.commands_per_page_with_scripts
    per_page = "-" if counted is None else f"{counted:.2f}"
    what = "cmds/page sent" if r.counted else "cmds/page incl. scripts"
    per_node = "+".join(str(n) for n in r.node_responses)
    return (
        f"[{step}] {r.variant:<24} {r.pages_per_s:5.0f} pages/s (steady "
        f"{r.steady_pages_per_s:.0f}, first page {r.to_first_page_s:.2f}s)  fetched "
        f"{r.fetched}/{r.pages}"
        f" ({per_node})  twice {r.fetched_twice}  {what} {per_page}  wall {r.wall_s:.1f}s"
        f"{'  CAPPED' if r.capped else ''}  {','.join(r.finish_reasons)}"
    )


def compile_checkout() -> None:
    """Write the bytecode of this checkout's package and of the bench's spider project, as an
    installed package has it (pip writes it at install): where PYTHONDONTWRITEBYTECODE is set,
    every node would compile them from source at start-up, about 0.2 s of CPU per node that
    an installed ``--baseline`` never pays."""
    root = Path(__file__).resolve().parents[1]
    for folder in (Path(scrapy_clustersync.__file__).parent, root / "bench" / "benchproj",
                   root / "example_project"):
        compileall.compile_dir(folder, quiet=1)


def plugin_source_digest() -> str:
    """A short digest of the plugin's source files, to tell if they changed during the bench."""
    package = Path(scrapy_clustersync.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".lua"):
            digest.update(path.relative_to(package).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def git_commit() -> str:
    """The checkout's commit, with ``+dirty`` if files differ from it ("" outside git)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    dirty = commit and git("status", "--porcelain", "--untracked-files=no")
    return f"{commit}+dirty" if dirty else commit


def environment(args: argparse.Namespace) -> dict[str, Any]:
    binary = redis_server_binary() or "redis-server"
    redis_version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.split("v=")[-1].split()[0]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pages": args.pages, "repeat": args.repeat, "cap_s": args.cap, "delay_s": DELAY_S,
        "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
        "scrapy": version("scrapy"), "scrapy_redis": version("scrapy-redis"),
        "redis_version": redis_version, "git_commit": git_commit(),
        "plugin_source": plugin_source_digest(),
    }


def print_report(summaries: dict[str, Summary], ratios: list[Ratio], meta: dict[str, Any]) -> None:
    print("\nHeadline figures (medians):")
    if meta["pages"] < SHORT_CRAWL_PAGES or meta["repeat"] < 3:
        print(f"  (a short or unrepeated run: fixed start-up costs and noise weigh more; "
              f"the targets are judged on the default {DEFAULT_PAGES} pages x 3)")
    for ratio in ratios:
        value = "n/a" if ratio.value is None else f"{ratio.value:.2f}"
        target = f"target {ratio.target}: {ratio.verdict}" if ratio.target else ratio.note
        print(f"  {ratio.label:<72} {value:>6}   ({target})")
    print(f"\nMarkdown for the README:\n\n{markdown_snippet(summaries, ratios, meta)}\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if redis_server_binary() is None:
        print("redis-server not found: install it (apt-get install redis-server)", file=sys.stderr)
        return 2
    if args.polite:
        polite.print_run(args)
        return 0
    variants = selected_variants(args.only, args.baseline, args.skip)
    compile_checkout()
    meta = environment(args)
    workdir = Path(tempfile.mkdtemp(prefix="clustersync-bench-"))
    started = time.monotonic()
    try:
        with SiteProcess(args.pages) as site:
            print(f"site: {args.pages} pages at {site.url}; work dir {workdir}", flush=True)
            results = run_rounds(variants, args.repeat, site, workdir, args.cap)
            counting = [] if args.no_count else run_counting(variants, site, workdir, args.cap)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["bench_s"] = round(time.monotonic() - started, 1)
    if plugin_source_digest() != meta["plugin_source"]:
        meta["plugin_source_changed"] = True
        print("WARNING: scrapy_clustersync's source changed while the bench ran; the runs "
              "measured different code. Run it again.", file=sys.stderr)
    summaries = summarize(results, counting)
    ratios = headline_ratios(summaries) + baseline_ratios(summaries)
    write_json(args.out, meta, results, counting, summaries, ratios)
    print_report(summaries, ratios, meta)
    print(f"results: {args.out}  ({meta['bench_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
