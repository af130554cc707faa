"""What ``clustersync status`` and ``clustersync jobs`` show: for people (a table that is never
cut, piped or not) and for scripts (``--json``)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..store import JobStatus, JobStore, StoreError, StoreUnavailable
from ..store.control_state import RUNNING, STOPPED, STOPPING, ControlState
from ..store.errors import AccessRefused
from ..store.job_list import job_names
from ..store.script_results import FinishedRun

if TYPE_CHECKING:
    import redis

#: a rate over fewer pages than this says nothing yet, so no ETA is given from it
MIN_PAGES_FOR_ETA = 1.0


def pages_per_min(report: JobStatus) -> float:
    """The cluster's pages per minute now: the sum of each live node's rate over its last
    minute (``pages_per_min`` of its heartbeat record; node/node_record.py)."""
    return sum(float(n.get("pages_per_min", 0)) for n in report.nodes if n["alive"])


def eta_s(report: JobStatus) -> float | None:
    """Seconds until the queue now waiting is crawled at the current rate, or None when that
    means nothing: nothing queued, no live node fetching, or the job finished."""
    rate = pages_per_min(report)
    if not report.queued or rate < MIN_PAGES_FOR_ETA or finished_at(report):
        return None
    return report.queued / rate * 60


def finished_at(report: JobStatus) -> str | None:
    """When the job finished (server time, ISO 8601 UTC), if its nodes recorded it."""
    finished = FinishedRun.from_meta(report.meta)
    if finished is None:
        return None
    return datetime.fromtimestamp(finished.at_ms / 1000, timezone.utc).isoformat(
        timespec="seconds")


def finished_reason(report: JobStatus) -> str | None:
    """Why the job finished, as its nodes recorded it (None while it has not)."""
    finished = FinishedRun.from_meta(report.meta)
    return finished.why() if finished is not None else None


def control_of(report: JobStatus) -> str:
    """The job's control state (``clustersync pause|resume|stop``): running, paused, stopping
    or stopped; a stop no live node holds up any more reads as stopped."""
    control = ControlState.parse(report.meta.get("control"), None).state
    if control == STOPPING and not any(node["alive"] for node in report.nodes):
        return STOPPED
    return control


def state_of(report: JobStatus) -> str:
    """paused, stopping or stopped (``clustersync pause|stop``); else running, waiting for
    nodes, idle, seeded, finished; "finished" once the nodes recorded the finish and no live
    node works on it again."""
    if control_of(report) != RUNNING:
        return control_of(report)
    if finished_at(report) and report.state in ("idle", "finished", "seeded"):
        return "finished"
    return report.state


def status_dict(report: JobStatus) -> dict[str, Any]:
    """The status as ``--json`` prints it."""
    summary = report.to_dict()
    summary.update(
        state=state_of(report), pages_per_min=round(pages_per_min(report), 1),
        eta_s=eta_s(report), finished_at=finished_at(report),
        finished_reason=finished_reason(report),
        start_run_by=report.start_claimed_by, control=control_of(report),
    )
    return summary


def print_status(report: JobStatus, out: Console) -> None:
    for line in summary_lines(report, status_dict(report)):
        out.print(line)
    out.print(_nodes_table(report))


def summary_lines(report: JobStatus, summary: dict[str, Any]) -> list[str]:
    """The status above the nodes table, a line each (rich markup)."""
    lines = [f"[bold]job[/bold] {report.job}  [bold]state[/bold] {summary['state']}"]
    if summary["finished_at"]:
        lines.append(f"  finished     {summary['finished_at']}  "
                     f"reason: {summary['finished_reason'] or 'not recorded'}")
    if report.start_claimed_by:
        done = "done" if report.start_done else "running"
        lines.append(f"  start()      run by {report.start_claimed_by} ({done})")
    for name in ("queued", "leased", "seen", "done", "dead_letters"):
        lines.append(f"  {name:<13}{summary[name]:>12,}")
    lines.append(f"  pages/min    {summary['pages_per_min']:>12,.1f}"
                 + _eta_text(summary["eta_s"]))
    if report.unserializable:
        lines.append(f"  kept local   {report.unserializable:>12,}  requests refused at enqueue "
                     "(cannot be encoded), crawled on the node that made them (not crash-safe)")
    for name in ("pushed", "filtered", "reclaimed"):
        lines.append(f"  {name:<13}{report.counters.get(name, 0):>12,}")
    return lines + _stats_lines(report.scrapy_stats) + _dedup_lines(report.dedup)


STATUS_PREFIX = "downloader/response_status_count/"


def _stats_lines(stats: dict[str, int]) -> list[str]:
    """The cluster's Scrapy stats in two lines: responses by status, then errors and bytes."""
    if not stats:
        return []
    statuses = sorted((name[len(STATUS_PREFIX):], value) for name, value in stats.items()
                      if name.startswith(STATUS_PREFIX))
    errors = stats.get("log_count/ERROR", 0)
    return [
        "  responses    " + (", ".join(f"{code}: {n:,}" for code, n in statuses) or "none"),
        f"  items {stats.get('item_scraped_count', 0):,}, retries {stats.get('retry/count', 0):,}"
        f", download errors {stats.get('downloader/exception_count', 0):,}, ERROR lines "
        f"{errors:,}, {stats.get('downloader/response_bytes', 0) / 2**20:,.1f} MiB received"
        " (all nodes)",
    ]


def _eta_text(eta: float | None) -> str:
    if eta is None:
        return ""
    return f"  ETA of the queue now waiting, at this rate: {_duration(eta)}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _dedup_lines(dedup: dict[str, Any]) -> list[str]:
    if dedup.get("mode") != "bloom":
        return [f"  dedup        exact set of {dedup.get('entries', 0):,} fingerprints"]
    if dedup.get("stage") == "exact set":  # a small job: no filter until it needs one
        return [f"  dedup        exact set of {dedup['entries']:,} fingerprints, until the "
                "job is big enough for its Bloom filter"]
    lines = []
    if dedup.get("exact_entries"):
        lines.append(f"  dedup        moving {dedup['exact_entries']:,} fingerprints from the "
                     "exact set into the Bloom filter")
    lines.append(
        f"  bloom filter  {dedup['entries']:,} entries (estimated), {dedup['layers']} "
        f"layer(s), {dedup['bytes']:,} bytes, expected error rate now "
        f"{dedup['expected_error_rate']:.2e} (configured {dedup['configured_error_rate']})"
    )
    if dedup.get("prepared_bytes"):
        lines.append(f"  bloom filter  next layer allocated ahead: "
                     f"{dedup['prepared_bytes']:,} bytes")
    return lines


def _nodes_table(report: JobStatus) -> Table:
    table = Table("node", "alive", "state", "pages", "pages/min", "items", "inflight",
                  "buffered", "rss MiB", "seen ago")
    for node in report.nodes:
        age = time.time() - float(node.get("updated", 0))
        table.add_row(
            node["id"], "yes" if node["alive"] else "no", str(node.get("state", "?")),
            str(node.get("pages", 0)), f"{float(node.get('pages_per_min', 0)):.0f}",
            str(node.get("items", 0)), str(node.get("inflight", 0)),
            str(node.get("buffered", 0)), f"{node.get('rss_bytes', 0) / 2**20:.0f}", f"{age:.0f}s",
        )
    return table


def job_rows(client: redis.Redis) -> list[dict[str, Any]]:
    """One summary per job on this Redis: state, queued, done (acked), live nodes."""
    rows: list[dict[str, Any]] = []
    for name in job_names(client):
        try:
            report = JobStore(client, name, node_id="cli", writes_seen=None).status()
        except (StoreUnavailable, AccessRefused):
            raise
        except StoreError as exc:  # one job's keys are not what this version reads
            rows.append({"job": name, "state": "unknown", "error": str(exc), "queued": None,
                         "leased": None, "done": None, "nodes": None, "pages_per_min": None,
                         "finished_at": None})
            continue
        if not report.exists:  # purged between the scan and now
            continue
        rows.append({
            "job": name, "state": state_of(report), "queued": report.queued,
            "leased": report.leased, "done": report.counters.get("acked", 0),
            "nodes": sum(1 for n in report.nodes if n["alive"]),
            "pages_per_min": round(pages_per_min(report), 1),
            "finished_at": finished_at(report),
        })
    return rows


def print_jobs(rows: list[dict[str, Any]], out: Console) -> None:
    table = Table("job", "state", "queued", "leased", "done", "live nodes", "pages/min",
                  "finished")
    unreadable = []
    for row in rows:
        if row["state"] == "unknown":
            unreadable.append(row)
            table.add_row(row["job"], "unknown", *[""] * 6)
            continue
        table.add_row(row["job"], row["state"], f"{row['queued']:,}", f"{row['leased']:,}",
                      f"{row['done']:,}", str(row["nodes"]), f"{row['pages_per_min']:.0f}",
                      row["finished_at"] or "")
    out.print(table)
    for row in unreadable:
        out.print(f"job {row['job']!r} cannot be read: {row['error']}", markup=False)
