"""Benchmark "broad": do the other sites of a broad crawl keep their pace beside a slow site
that most links point at?

    python bench/broad.py [--cap 30] [--light-pages 250] [--without redirected|removed]
                          [--repeat 1] [--only KEY ...] [--keep]

Serves 20 local sites from this process (testkit/web.py), each on its own loopback address
(127.0.0.2-21: each its own Scrapy download slot): a *heavy* site that 80% of every page's links
point at (a million pages, at random positions among each page's links), crawled with a
per-site delay of 0.5 s, and 19 *light* sites of ``--light-pages`` pages without delay. Each
variant crawls it from page 0 of a light site with the example project's spider at
``CONCURRENT_REQUESTS = 100`` (Scrapy's broad-crawl guide), and right after (or before: the
order alternates by round) crawls the same 19 light sites with the heavy site absent. Its
links then point at light pages instead (``--without redirected``, the default): each heavy
link of a page becomes one of that page's own light links, so every page keeps its 15 links
and the light sites their link graph; a crawler parses and follows as many links per page as
with the heavy site, and the two crawls differ only in where those 12 links lead: with the
heavy site they are new requests to queue, without it duplicates. On a CPU-bound machine the
ratio then measures whether the slow site starves the others, not how much cheaper a page with
3 links is (``--without removed``, where the heavy links are left out). With the heavy site a
run never ends and is stopped after ``--cap`` seconds; without it, a run ends when the light
sites are crawled (or at twice the cap). Each run has a redis-server of its own and fresh
sites.

From the sites' own hit logs: the light sites' pages/s, summed, over the steady window (from
3 s after the first page to the cap, or, when the light sites were crawled to their end, to
their 90th-percentile page, so that the last pages found one by one are left out), the heavy
site's pages/s over the same window, pages fetched twice (every run) and pages missing (every
run that ended by itself); from the nodes' CPU, sampled every 0.25 s, their CPU per page over
the same window (start-up and stopping left out): how well the two crawls' pages are matched.
The figure of each variant is the ratio of its light sites' pages/s with the heavy site to
without it, both measured in the same session: 1.0 if the heavy site costs the others
nothing; the target for scrapy-clustersync is at least 0.8. ``--repeat N`` runs N rounds, the
variants one after the other in each, and the table shows medians. Prints a Markdown table and
writes ``bench/results/broad.json``. About 4 minutes on 2 cores (4.5 beside other work).

The heavy site's delay: ``CLUSTERSYNC_SITE_DELAYS`` for scrapy-clustersync (the cluster's
budget: 2 pages/s for all nodes together), Scrapy's ``DOWNLOAD_SLOTS`` for the others (each
node its own: two scrapy-redis nodes fetch it at 4 pages/s). Vanilla Scrapy (one process) is the
reference: its default queue since Scrapy 2.13, ``DownloaderAwarePriorityQueue``, hands out
first the requests of the sites with the fewest downloads under way.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
import tempfile
import time
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report import fmt, quotient
from run import compile_checkout, git_commit
from runner import Crawl, Variant, crawl, node_stats

from testkit.rates import growth_between, rate_between, steady_window
from testkit.redis_server import redis_server_binary
from testkit.site import AgentHits
from testkit.web import HEAVY, WITHOUT_HEAVY, BroadWeb, Web, loopback_host

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "broad.json"
HEAVY_DELAY_S = 0.5
CONCURRENT_REQUESTS = 100
#: the steady window starts this long after a run's first page (the frontier fills up)
WARMUP_S = 3.0
#: a capped run's nodes are killed this long after Ctrl-C: the heavy site's requests they
#: hold would keep a graceful close waiting for minutes, and nothing after the cap is measured
STOP_GRACE_S = 3.0
#: how often the nodes' CPU is sampled, to read it over the steady window
CPU_SAMPLE_S = 0.25
TARGET_RATIO = 0.8


def node_settings(variant: Variant) -> dict[str, str]:
    """Every node's ``-s`` settings: the broad-crawl concurrency and the heavy site's delay, as
    ``variant``'s engine takes it."""
    heavy = loopback_host(HEAVY)
    if variant.engine == "clustersync":
        delay = {"CLUSTERSYNC_SITE_DELAYS": json.dumps({heavy: HEAVY_DELAY_S})}
    else:
        delay = {"DOWNLOAD_SLOTS": json.dumps({heavy: {"delay": HEAVY_DELAY_S}})}
    return {"CONCURRENT_REQUESTS": str(CONCURRENT_REQUESTS), **delay}


VARIANTS = (Variant("vanilla", 1), Variant("scrapy-redis", 2), Variant("clustersync", 2))


@dataclass
class BroadRun:
    """What one run measured, from the sites' hit logs. Rates are pages per second."""

    variant: str
    heavy: bool  # the heavy site was there
    round: int
    capped: bool
    wall_s: float
    light_pages: int
    light_fetched: int  # distinct light pages
    heavy_fetched: int
    fetched_twice: int  # distinct pages (of any site) fetched more than once
    missing: int | None  # light pages not fetched, for a run that ended by itself
    window_s: float | None
    light_per_s: float | None
    heavy_per_s: float | None
    window_pages: int | None  # pages (light and heavy) fetched in the steady window
    window_cpu_s: float | None  # user + system CPU of every node over the steady window
    node_cpu_s: float = 0.0  # user + system CPU of every node, start-up and stop included
    finish_reasons: list[str] = field(default_factory=list)

    @property
    def node_cpu_ms_per_page(self) -> float | None:
        """The nodes' CPU per page fetched over the steady window: what a page costs a node
        once started. With the heavy site, 12 of a page's 15 links are new requests to queue;
        without it they are duplicates (or, removed, not there at all)."""
        if self.window_cpu_s is None or not self.window_pages:
            return None
        return 1000 * self.window_cpu_s / self.window_pages


def measure(plan: BroadWeb, hits: Mapping[int, AgentHits], crawled: Crawl,
            cap_at: float) -> dict[str, Any]:
    """The figures of one run from what each site saw (site index -> its hits) and the nodes'
    CPU, the crawl cut at ``cap_at`` (time.monotonic()) if ``crawled.capped``."""
    capped = crawled.capped
    light = sorted(t for index in plan.light for t in hits[index].times)
    light_fetched = sum(len(hits[index].hits) for index in plan.light)
    light_pages = plan.light_pages * len(plan.light)
    complete = light_fetched == light_pages
    firsts = [h.first for h in hits.values() if h.first is not None]
    window = None if not firsts else steady_window(
        light, min(firsts), WARMUP_S, cap_at if capped and not complete else None)
    heavy = hits[HEAVY] if plan.with_heavy else AgentHits({}, [])
    every = sorted(t for h in hits.values() for t in h.times)
    return {
        "light_pages": light_pages, "light_fetched": light_fetched,
        "heavy_fetched": len(heavy.hits),
        "fetched_twice": sum(1 for h in hits.values() for n in h.hits.values() if n > 1),
        "missing": None if capped else light_pages - light_fetched,
        "window_s": None if window is None else round(window[1] - window[0], 2),
        "light_per_s": None if window is None else rate_between(light, *window),
        "heavy_per_s": None if window is None or not plan.with_heavy
        else rate_between(heavy.times, *window),
        "window_pages": None if window is None
        else bisect_right(every, window[1]) - bisect_left(every, window[0]),
        "window_cpu_s": None if window is None
        else growth_between(crawled.cpu_samples, *window),
    }


def run_one(variant: Variant, plan: BroadWeb, round_no: int, workdir: Path,
            cap_s: float) -> BroadRun:
    """One crawl of ``variant`` on fresh sites of ``plan``, with the heavy site or without."""
    with_heavy = plan.with_heavy
    label = f"{variant.key.replace(' ', '_')}-{'heavy' if with_heavy else 'light'}-r{round_no}"
    agent = f"bench/{label}"
    run_cap_s = cap_s if with_heavy else 2 * cap_s
    with Web(plan) as web:
        crawled = crawl(variant, web.start_url, agent, workdir / label, run_cap_s,
                        node_settings(variant), STOP_GRACE_S, CPU_SAMPLE_S)
        hits = {index: site.agent_hits(agent) for index, site in web.sites.items()}
    stats = node_stats(workdir / label, variant.nodes)
    return BroadRun(
        variant=variant.key, heavy=with_heavy, round=round_no, capped=crawled.capped,
        wall_s=round(crawled.wall_s, 1), node_cpu_s=round(crawled.node_cpu_s, 2),
        finish_reasons=[str((s or {}).get("finish_reason", "killed")) for s in stats],
        **measure(plan, hits, crawled, crawled.started + run_cap_s))


def run_rounds(variants: Sequence[Variant], repeat: int, plan: BroadWeb, workdir: Path,
               cap_s: float) -> list[BroadRun]:
    """Each variant with and without the heavy site (``plan`` says what becomes of its links
    then), one right after the other (which comes first alternates by round), so that a
    ratio's two runs see the same machine."""
    runs = []
    for round_no in range(repeat):
        for variant in variants:
            for with_heavy in (True, False) if round_no % 2 == 0 else (False, True):
                run = run_one(variant, replace(plan, with_heavy=with_heavy), round_no, workdir,
                              cap_s)
                runs.append(run)
                print(progress_line(run, f"{round_no + 1}/{repeat}"), flush=True)
    return runs


def progress_line(run: BroadRun, step: str) -> str:
    heavy = "with heavy" if run.heavy else "without   "
    return (f"[{step}] {run.variant:<16} {heavy}  light {fmt(run.light_per_s, '.1f')} pages/s, "
            f"heavy {fmt(run.heavy_per_s, '.1f')} over {fmt(run.window_s, '.1f')} s; light fetched "
            f"{run.light_fetched}"
            f"/{run.light_pages}, twice {run.fetched_twice}, missing "
            f"{'-' if run.missing is None else run.missing}, node CPU "
            f"{fmt(run.node_cpu_ms_per_page, '.2f')} ms/page, wall {run.wall_s}s"
            f"{'  CAPPED' if run.capped else ''}  {','.join(run.finish_reasons)}")


def ratios(runs: Sequence[BroadRun]) -> dict[str, dict[str, Any]]:
    """Per variant: the ratio of light pages/s with the heavy site to without, of each round,
    and their median."""
    found: dict[str, dict[str, Any]] = {}
    for variant in dict.fromkeys(run.variant for run in runs):
        by_round: dict[int, dict[bool, float | None]] = {}
        for run in runs:
            if run.variant == variant:
                by_round.setdefault(run.round, {})[run.heavy] = run.light_per_s
        rounds = [quotient(pair.get(True), pair.get(False)) for pair in by_round.values()]
        known = [r for r in rounds if r is not None]
        found[variant] = {"rounds": rounds,
                          "median": statistics.median(known) if known else None}
    return found


def markdown_table(runs: Sequence[BroadRun], found: Mapping[str, Mapping[str, Any]]) -> str:
    """Medians per variant and heavy site (with, without), and the ratio of the two."""
    lines = ["| variant | light sites pages/s, with heavy | without | ratio (target for "
             f"clustersync >= {TARGET_RATIO}) | heavy site pages/s | light pages fetched, with "
             "heavy | fetched twice | missing | node CPU ms/page (steady window), with heavy | "
             "without |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for variant, ratio in found.items():
        mine = [run for run in runs if run.variant == variant]
        with_heavy = [run for run in mine if run.heavy]
        without = [run for run in mine if not run.heavy]
        missing = [run.missing for run in mine if run.missing is not None]
        lines.append(
            f"| {variant} | {fmt(_median_of(r.light_per_s for r in with_heavy), '.1f')} | "
            f"{fmt(_median_of(r.light_per_s for r in without), '.1f')} | "
            f"{fmt(ratio['median'], '.2f')} | "
            f"{fmt(_median_of(r.heavy_per_s for r in with_heavy), '.1f')} | "
            f"{min(r.light_fetched for r in with_heavy)} of {with_heavy[0].light_pages} | "
            f"{max(r.fetched_twice for r in mine)} | "
            f"{max(missing) if missing else 'n/a (capped)'} | "
            f"{fmt(_median_of(r.node_cpu_ms_per_page for r in with_heavy), '.2f')} | "
            f"{fmt(_median_of(r.node_cpu_ms_per_page for r in without), '.2f')} |")
    return "\n".join(lines)


def write_json(path: Path, meta: Mapping[str, Any], runs: Sequence[BroadRun],
               found: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "ratios": found, "runs": [
        asdict(run) | {"node_cpu_ms_per_page": run.node_cpu_ms_per_page} for run in runs]}
    path.write_text(json.dumps(document, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cap", type=float, default=30.0,
                        help="seconds a run with the heavy site lasts (default 30); without "
                        "it, a run is stopped at twice this if still crawling")
    parser.add_argument("--light-pages", type=int, default=BroadWeb.light_pages,
                        help="pages of each of the 19 light sites (default "
                        f"{BroadWeb.light_pages})")
    parser.add_argument("--without", choices=WITHOUT_HEAVY, default="redirected",
                        help="the crawl without the heavy site: its links point at the "
                        "page's own light links instead, so pages keep their 15 links "
                        "(redirected, the default), or are left out (removed: 3 links)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds, interleaved; the table shows medians (default 1)")
    parser.add_argument("--only", nargs="+", metavar="KEY",
                        help="run only variants whose name contains one of these")
    parser.add_argument("--keep", action="store_true", help="keep the nodes' logs and stats")
    parser.add_argument("--out", type=Path, default=RESULTS_PATH, help="where to write JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if redis_server_binary() is None:
        print("redis-server not found: install it (apt-get install redis-server)", file=sys.stderr)
        return 2
    variants = [v for v in VARIANTS if not args.only or any(k in v.key for k in args.only)]
    compile_checkout()
    plan = BroadWeb(light_pages=args.light_pages, without=args.without)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": git_commit(), "cap_s": args.cap, "repeat": args.repeat,
            "plan": asdict(plan),
            "heavy_delay_s": HEAVY_DELAY_S, "concurrent_requests": CONCURRENT_REQUESTS,
            "warmup_s": WARMUP_S}
    workdir = Path(tempfile.mkdtemp(prefix="clustersync-broad-"))
    started = time.monotonic()
    try:
        runs = run_rounds(variants, args.repeat, plan, workdir, args.cap)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["bench_s"] = round(time.monotonic() - started, 1)
    found = ratios(runs)
    write_json(args.out, meta, runs, found)
    print(f"\nLight sites' pages/s with the heavy site ({HEAVY_DELAY_S} s delay, 80% of the "
          f"links) and without it (its links {args.without}; medians of {args.repeat} "
          "round(s)):\n")
    print(markdown_table(runs, found))
    ours = found.get("clustersync x2", {}).get("median")
    if ours is not None:
        print(f"\nclustersync x2: {ours:.2f} (target >= {TARGET_RATIO}: "
              f"{'met' if ours >= TARGET_RATIO else 'NOT met'})")
    twice = sum(run.fetched_twice for run in runs)
    missing = sum(run.missing or 0 for run in runs)
    print(f"pages fetched twice, every run: {twice}; pages missing, runs that ended by "
          f"themselves: {missing}  ({'OK' if not twice and not missing else 'FAILED'})")
    kept = f"; logs in {workdir}" if args.keep else ""
    print(f"results: {args.out}  ({meta['bench_s']:.0f} s{kept})")
    return 0 if not twice and not missing else 1


def _median_of(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


if __name__ == "__main__":
    sys.exit(main())
