"""Medians per variant, the three headline ratios, the table, the Markdown snippet and the JSON."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner import RunResult

OURS = "clustersync"
PEER = "scrapy-redis"
DELAY_LABEL = "+2.5ms"
FEED_LABEL = "+feed"
#: one node writing every item (one per page) to the results stream, as bench/run.py's spider
#: does: the design's budget is one command per page; with results on it is held to half that
RESULTS_COMMANDS_TARGET = "<= 0.5"
#: far nodes (bench/run.py FAR_DELAYS_S): label, target over the whole crawl, target steady
FAR_TARGETS = (("+25ms", ">= 0.9", ">= 0.9"), ("+50ms", ">= 0.85", ">= 0.9"),
               ("+50ms region far", ">= 0.9", ">= 0.9"))


@dataclass(frozen=True)
class Summary:
    """The median of each measure over a variant's repeats, and the worst correctness counts."""

    variant: str
    runs: int
    pages_per_s: float
    steady_pages_per_s: float  # 10th to 90th percentile of the pages
    to_first_page_s: float
    span_s: float
    to_last_page_s: float
    wall_s: float
    fetched: int  # fewest distinct pages any repeat fetched
    fetched_twice: int  # most, over the repeats
    missing: int  # most, over the repeats
    commands_per_page: float | None  # sent by the nodes, from the variant's counting run
    commands_per_page_with_scripts: float | None
    slowest_redis_call_ms: float | None  # worst over the repeats
    node_cpu_ms_per_page: float
    redis_cpu_ms_per_page: float | None
    capped: bool

    @classmethod
    def of(cls, runs: Sequence[RunResult], counting_run: RunResult | None) -> Summary:
        with_scripts = [
            r.commands_per_page_with_scripts for r in runs
            if r.commands_per_page_with_scripts is not None
        ]
        slowest = [r.slowest_redis_call_ms for r in runs if r.slowest_redis_call_ms is not None]
        redis_cpu = [r.redis_cpu_ms_per_page for r in runs if r.redis_cpu_ms_per_page is not None]
        return cls(
            variant=runs[0].variant, runs=len(runs),
            pages_per_s=_median(r.pages_per_s for r in runs),
            steady_pages_per_s=_median(r.steady_pages_per_s for r in runs),
            to_first_page_s=_median(r.to_first_page_s for r in runs),
            span_s=_median(r.span_s for r in runs),
            to_last_page_s=_median(r.to_last_page_s for r in runs),
            wall_s=_median(r.wall_s for r in runs),
            fetched=min(r.fetched for r in runs),
            fetched_twice=max(r.fetched_twice for r in runs),
            missing=max(r.missing for r in runs),
            commands_per_page=counting_run.commands_per_page if counting_run else None,
            commands_per_page_with_scripts=_median(with_scripts) if with_scripts else None,
            slowest_redis_call_ms=max(slowest, default=None),
            node_cpu_ms_per_page=_median(r.node_cpu_ms_per_page for r in runs),
            redis_cpu_ms_per_page=_median(redis_cpu) if redis_cpu else None,
            capped=any(r.capped for r in runs),
        )


@dataclass(frozen=True)
class Ratio:
    """One headline figure: ``numerator / denominator`` of a measure, or a plain value."""

    label: str
    value: float | None
    target: str  # e.g. ">= 0.95"; "" when there is none
    note: str = "peer, for reference"  # shown instead of a target

    @property
    def verdict(self) -> str:
        if not self.target or self.value is None:
            return ""
        op, bound = self.target.split()
        ok = self.value >= float(bound) if op == ">=" else self.value <= float(bound)
        return "PASS" if ok else "FAIL"


def summarize(
    results: Sequence[RunResult], counting_runs: Sequence[RunResult]
) -> dict[str, Summary]:
    """Variant key -> Summary of its timed runs, in the order the variants first ran."""
    grouped: dict[str, list[RunResult]] = {}
    for result in results:
        grouped.setdefault(result.variant, []).append(result)
    counted = {r.variant: r for r in counting_runs}
    return {key: Summary.of(runs, counted.get(key)) for key, runs in grouped.items()}


def headline_ratios(summaries: dict[str, Summary]) -> list[Ratio]:
    """The figures the design sets targets for, for this project and for the peer; one node
    is rated against vanilla with and without a feed of its items (clustersync x1 writes them
    to the results stream)."""
    ratios = []
    for engine, target in ((OURS, ">= 0.95"), (PEER, "")):
        ratios.append(_rate_ratio(summaries, f"{engine} x1", "vanilla x1", target))
    # items written: to the results stream (clustersync's default), to a feed (vanilla)
    ratios.append(_rate_ratio(summaries, f"{OURS} x1", f"vanilla x1 {FEED_LABEL}", ">= 0.95",
                              note=""))
    for engine, target in ((OURS, RESULTS_COMMANDS_TARGET), (PEER, "")):
        summary = summaries.get(f"{engine} x1")
        per_page = summary.commands_per_page if summary else None
        ratios.append(Ratio(f"{engine} x1 Redis commands sent per crawled page", per_page, target))
    for engine, target in ((OURS, ">= 0.8"), (PEER, "")):
        delayed, direct = f"{engine} x2 {DELAY_LABEL}", f"{engine} x2"
        ratios.append(_rate_ratio(summaries, delayed, direct, target))
    for engine in (OURS, PEER):
        ratios.append(_cpu_ratio(summaries, f"{engine} x1", "vanilla x1"))
    return ratios + far_ratios(summaries)


def far_ratios(summaries: dict[str, Summary]) -> list[Ratio]:
    """Two nodes far from Redis against the same two nodes near it: over the whole crawl
    (start-up included) and in steady state (10th to 90th percentile of the pages)."""
    ratios = []
    direct = f"{OURS} x2"
    for label, whole, steady in FAR_TARGETS:
        far = f"{OURS} x2 {label}"
        ratios.append(_rate_ratio(summaries, far, direct, whole, note=""))
        ratios.append(_rate_ratio(summaries, far, direct, steady, note="", steady=True))
    return ratios


def baseline_ratios(summaries: dict[str, Summary]) -> list[Ratio]:
    """For an A/B run (``--baseline``): each clustersync variant against its twin at the older
    revision (pages/s and node CPU per page), and the older revision's own headline ratios."""
    ratios = []
    for key in summaries:
        if not key.startswith(f"{OURS}@"):
            continue
        engine, rest = key.split(" ", 1)
        ours = f"{OURS} {rest}"
        if ours in summaries:
            ratios.append(_rate_ratio(summaries, ours, key, "", note="A/B: this code / older"))
            ratios.append(_cpu_ratio(summaries, ours, key))
        if rest == "x1":
            ratios.append(_rate_ratio(summaries, key, "vanilla x1", "", note="older revision"))
            ratios.append(_rate_ratio(summaries, key, f"vanilla x1 {FEED_LABEL}", "",
                                      note="older revision"))
        if rest == f"x2 {DELAY_LABEL}":
            ratios.append(_rate_ratio(summaries, key, f"{engine} x2", "", note="older revision"))
    return ratios


def _cpu_ratio(summaries: dict[str, Summary], key: str, base: str) -> Ratio:
    """Node CPU per page against vanilla: the cost of a scheduler, less noisy than pages/s."""
    label = f"{key} node CPU per page / {base} node CPU per page"
    if key not in summaries or base not in summaries:
        return Ratio(label, None, "", "diagnostic")
    value = quotient(summaries[key].node_cpu_ms_per_page, summaries[base].node_cpu_ms_per_page)
    return Ratio(label, value, "", "diagnostic, whole run incl. start-up")


def _rate_ratio(
    summaries: dict[str, Summary], key: str, base: str, target: str,
    note: str = "peer, for reference", steady: bool = False,
) -> Ratio:
    capped = " (capped run)" if key in summaries and summaries[key].capped else ""
    rate = "steady pages/s" if steady else "pages/s"
    label = f"{key} {rate} / {base} {rate}{capped}"
    if key not in summaries or base not in summaries:
        return Ratio(label, None, target, note)
    if steady:
        value = quotient(summaries[key].steady_pages_per_s, summaries[base].steady_pages_per_s)
    else:
        value = quotient(summaries[key].pages_per_s, summaries[base].pages_per_s)
    return Ratio(label, value, target, note)


def markdown_table(summaries: dict[str, Summary]) -> str:
    head = ("| variant | runs | pages/s | steady pages/s | crawl s | to first page s | "
            "to last page s | wall s | fetched | "
            "fetched twice | missing | Redis cmds/page sent | incl. in scripts | "
            "slowest Redis call ms | node CPU ms/page | Redis CPU ms/page |")
    rows = [head, "|" + " --- |" * 16]
    for s in summaries.values():
        rows.append(
            f"| {s.variant}{' (capped)' if s.capped else ''} | {s.runs} | {s.pages_per_s:.0f} | "
            f"{s.steady_pages_per_s:.0f} | {s.span_s:.1f} | {s.to_first_page_s:.2f} | "
            f"{s.to_last_page_s:.1f} | {s.wall_s:.1f} | {s.fetched} | "
            f"{s.fetched_twice} | {s.missing} | {fmt(s.commands_per_page, '.2f')} | "
            f"{fmt(s.commands_per_page_with_scripts, '.1f')} | "
            f"{fmt(s.slowest_redis_call_ms, '.0f', none='<10')} | "
            f"{s.node_cpu_ms_per_page:.2f} | {fmt(s.redis_cpu_ms_per_page, '.2f')} |"
        )
    return "\n".join(rows)


def markdown_ratios(ratios: Sequence[Ratio]) -> str:
    rows = ["| figure | measured | target |", "| --- | --- | --- |"]
    for r in ratios:
        target = f"{r.target} {r.verdict}".strip() if r.target else f"({r.note})"
        rows.append(f"| {r.label} | {fmt(r.value, '.2f')} | {target} |")
    return "\n".join(rows)


def markdown_snippet(
    summaries: dict[str, Summary], ratios: Sequence[Ratio], meta: dict[str, Any]
) -> str:
    capped = [s.variant for s in summaries.values() if s.capped]
    notes = [
        f"{meta['pages']} pages, {meta['repeat']} run(s) per variant (median), "
        f"{meta['cpus']} CPU cores, site and every node in its own process, "
        f"CONCURRENT_REQUESTS 16, Redis {meta['redis_version']}, scrapy {meta['scrapy']}, "
        f"scrapy-redis {meta['scrapy_redis']}.",
        "pages/s = distinct pages / (last page fetched - first page fetched), as timed by the "
        "site; this leaves out start-up and the idle wait before nodes close. Steady pages/s: "
        "the same from the 10th to the 90th percentile of the pages. "
        "Redis cmds/page sent: what the nodes send (a script call is one command) over a "
        "whole run, counted with MONITOR in a separate, untimed run; incl. in scripts: every "
        "command Redis ran (INFO commandstats), median of the timed runs. CPU: user + system "
        "seconds of the node processes and of redis-server over the whole run (start-up and "
        "idle wait included) per page.",
    ]
    if capped:
        notes.append(
            f"Capped at {meta['cap_s']:g} s and rated on the pages fetched until then: "
            + ", ".join(capped) + "."
        )
    return "\n\n".join([markdown_ratios(ratios), markdown_table(summaries), " ".join(notes)])


def write_json(
    path: Path, meta: dict[str, Any], results: Sequence[RunResult],
    counting_runs: Sequence[RunResult], summaries: dict[str, Summary], ratios: Sequence[Ratio],
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "meta": meta,
        "ratios": [asdict(r) | {"verdict": r.verdict} for r in ratios],
        "summary": {key: asdict(s) for key, s in summaries.items()},
        "runs": [r.to_dict() for r in results],
        "counting_runs": [r.to_dict() for r in counting_runs],
    }
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def _median(values: Any) -> float:
    return float(statistics.median(list(values)))


def quotient(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None if either is unknown or ``b`` is 0."""
    return a / b if a is not None and b else None


def fmt(value: float | None, spec: str, none: str = "n/a") -> str:
    """``value`` formatted with ``spec``, or ``none`` if it is unknown."""
    return none if value is None else format(value, spec)

