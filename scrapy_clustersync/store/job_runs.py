"""A job's runs: the figures of the run under way beside the job's totals.

A run starts when the job is created (run 1) and at each restart (``clustersync restart``,
CLUSTERSYNC_RECRAWL). The script that starts it records, in the same step, the run's number,
its start (server ms) and the job's figures at that moment in the job's meta hash
(prelude.lua ``start_run``); this run's figures are the job's now minus those. No Redis here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .script_results import JobStatus

#: the figures shown per run and in total (job_totals says where each is kept)
FIGURES = ("pages", "items", "done", "seen")


@dataclass(frozen=True)
class RunStart:
    """How the run under way started: its number, when (server ms; None if not recorded),
    and the job's figures then (``base``; empty for a job created before runs were recorded:
    its run's figures are then its totals, ``known`` False)."""

    number: int
    started_ms: int | None
    base: dict[str, int] = field(default_factory=dict)
    known: bool = True

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> RunStart:
        """The run as the job's meta hash (as text) records it."""
        base = _base_of(meta.get("run_base"))
        number = int(meta.get("run") or int(meta.get("restarts") or 0) + 1)
        started = meta.get("run_started_ms") or meta.get("restarted_ms") or meta.get("created_ms")
        known = base is not None or number == 1
        return cls(number, int(started) if started else None, base or {}, known)


def _base_of(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(name): int(value) for name, value in data.items()
            if isinstance(value, (int, float))}


def job_totals(report: JobStatus) -> dict[str, int]:
    """The job's figures over its whole life: pages fetched and items scraped (every node's
    Scrapy stats, summed), requests done (acked) and URLs seen (the dedup record)."""
    return {
        "pages": report.scrapy_stats.get("response_received_count", 0),
        "items": report.scrapy_stats.get("item_scraped_count", 0),
        "done": report.counters.get("acked", 0),
        "seen": report.seen,
    }


def run_figures(report: JobStatus, run: RunStart) -> dict[str, int]:
    """The same figures for the run under way: the totals less what they were at its start
    (``seen`` less the seen record as the run found it; 0 at its start after a forgotten one).
    """
    totals = job_totals(report)
    base = dict(run.base)
    base.setdefault("done", base.get("acked", 0))
    return {name: max(0, totals[name] - int(base.get(name, 0))) for name in FIGURES}


def run_summary(report: JobStatus) -> dict[str, Any]:
    """``status --json``'s ``run``: number, started_ms, known and this run's figures."""
    run = RunStart.from_meta(report.meta)
    return {"number": run.number, "started_ms": run.started_ms, "known": run.known,
            **run_figures(report, run)}


def totals_summary(report: JobStatus) -> dict[str, Any]:
    """``status --json``'s ``totals``: runs so far and the job's figures over all of them,
    with what is kept of pruned nodes (``pruned_nodes``)."""
    run = RunStart.from_meta(report.meta)
    return {"runs": run.number, **job_totals(report),
            "pruned_nodes": report.pruned.get("nodes", 0)}
