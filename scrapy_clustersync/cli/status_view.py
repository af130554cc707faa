"""What ``clustersync status`` and ``clustersync jobs`` show: for people (a table that is never
cut, piped or not) and for scripts (``--json``). The figures are the run's under way, beside the
job's totals (store/job_runs.py); the nodes are listed by node_view.py. Text read from Redis is
never rich markup: it is printed as ``Text``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..store import JobStatus, JobStore, StoreError, StoreUnavailable
from ..store.control_state import RUNNING, STOPPED, STOPPING, ControlState
from ..store.errors import AccessRefused
from ..store.job_list import job_names
from ..store.job_runs import run_summary, totals_summary
from ..store.script_results import FinishedRun
from .node_view import STATUS_COLUMNS, group_nodes, hidden_line, node_table
from .output import when_iso
from .settings_lag import job_settings_version, mark_lagging

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
    """The status as ``--json`` prints it: ``run`` has this run's figures, ``totals`` the
    job's over every run (the top-level ``done`` and ``seen`` are the job's totals too); a
    live node behind the job's shared settings has ``settings_lag`` (settings_lag.py)."""
    mark_lagging(report.nodes, job_settings_version(report.meta))
    summary = report.to_dict()
    state = state_of(report)
    # a finish record of a job seeded since is the end of nothing now under way
    ended = state == "finished"
    run = run_summary(report)
    run.update(started_at=when_iso(run["started_ms"]),
               pages_per_min=round(pages_per_min(report), 1),
               finished_at=finished_at(report) if ended else None,
               finished_reason=finished_reason(report) if ended else None)
    summary.update(
        state=state, pages_per_min=round(pages_per_min(report), 1),
        eta_s=eta_s(report), finished_at=run["finished_at"],
        finished_reason=run["finished_reason"],
        start_run_by=report.start_claimed_by, control=control_of(report),
        stop_reason=stop_reason_of(report), run=run, totals=totals_summary(report),
        primary=primary_of(report),
    )
    if partitions_shown(report):
        summary["partitions"] = [each.to_dict() for each in report.partitions]
    return summary


def partitions_shown(report: JobStatus) -> bool:
    """Each partition is shown for a job split into partitions, and on a Redis Cluster (where
    it says the primary each is on); a job of one partition on one Redis shows none."""
    return report.split or any(each.primary for each in report.partitions)


def partition_lines(report: JobStatus) -> list[Text]:
    """A line per partition: queued, leased, bytes queued and, on a Redis Cluster, its
    primary; a job of one partition on a cluster gets its primary's line alone."""
    if not partitions_shown(report):
        return []
    if not report.split:
        return [Text(f"  primary      {report.partitions[0].primary} (Redis Cluster)")]
    lines = [Text(f"  partitions   {len(report.partitions)}")]
    for each in report.partitions:
        where = f"  primary {each.primary}" if each.primary else ""
        lines.append(Text(f"    {each.partition:>3}  queued {each.queued:>10,}  leased "
                          f"{each.leased:>8,}  bytes {each.bytes:>12,}{where}"))
    return lines


def primary_of(report: JobStatus) -> dict[str, Any] | None:
    """Through Sentinel, the Redis primary the job's nodes last recorded (``address``), how
    many times it changed (``failovers``), the one before and when (None: not recorded, the
    nodes reach one Redis directly)."""
    meta = report.meta
    if not meta.get("primary"):
        return None
    changed_ms = meta.get("primary_changed_ms")
    return {"address": meta["primary"], "failovers": int(meta.get("primary_changes") or 0),
            "before": meta.get("primary_before"),
            "changed_at": when_iso(int(changed_ms)) if changed_ms else None}


def _primary_line(primary: dict[str, Any] | None) -> list[Text]:
    if primary is None:
        return []
    text = f"  primary      {primary['address']} (through Sentinel)"
    if primary["failovers"]:
        text += (f"; failed over {primary['failovers']} time(s), last at "
                 f"{primary['changed_at']} from {primary['before']}")
    return [Text(text)]


def stop_reason_of(report: JobStatus) -> str | None:
    """The close reason a CLOSESPIDER_* limit of the cluster stopped the job with (None: no
    limit did; a resume clears it)."""
    reason = report.meta.get("stop_reason")
    return str(reason) if reason and control_of(report) != RUNNING else None


def print_status(report: JobStatus, out: Console, every: bool = False) -> None:
    """The status for people: the summary, then the nodes of this run (``every``: all)."""
    for line in summary_lines(report, status_dict(report)):
        out.print(line)
    groups = group_nodes(report)
    out.print(node_table(groups.listed(every), out.width, STATUS_COLUMNS))
    hidden = hidden_line(groups, every)
    if hidden:
        out.print(hidden, markup=False, highlight=False)


def headline(report: JobStatus, summary: dict[str, Any]) -> Text:
    """"job NAME  state STATE  run N", the job's name as plain text."""
    state = str(summary["state"])
    if summary.get("stop_reason"):
        state += f" ({summary['stop_reason']})"
    line = Text.assemble(("job", "bold"), " ", report.job, "  ", ("state", "bold"), " ", state)
    if summary["run"]["number"] > 1:
        line.append_text(Text.assemble("  ", ("run", "bold"), f" {summary['run']['number']}"))
    return line


def summary_lines(report: JobStatus, summary: dict[str, Any]) -> list[Text]:
    """The status above the nodes table, a line each (plain text but the headline's labels)."""
    lines = [headline(report, summary)]
    run = summary["run"]
    if run["started_at"]:
        lines.append(Text(f"  started      {run['started_at']}"))
    if summary["finished_at"]:
        lines.append(Text(f"  finished     {summary['finished_at']}  "
                          f"reason: {summary['finished_reason'] or 'not recorded'}"))
    if report.start_claimed_by:
        done = "done" if report.start_done else "running"
        lines.append(Text(f"  start()      run by {report.start_claimed_by} ({done})"))
    lines += _primary_line(summary["primary"])
    lines += partition_lines(report)
    lines += [Text(line) for line in figure_lines(report, summary)]
    for name in ("queued", "leased", "dead_letters"):
        lines.append(Text(f"  {name:<13}{summary[name]:>12,}"))
    lines.append(Text(f"  pages/min    {summary['pages_per_min']:>12,.1f}"
                      + _eta_text(summary["eta_s"])))
    return lines + [Text(line) for line in _more_lines(report)]


def figure_lines(report: JobStatus, summary: dict[str, Any]) -> list[str]:
    """pages, items, done and seen: this run's, and the job's over every run beside them once
    there was more than one run."""
    run, totals = summary["run"], summary["totals"]
    several = run["number"] > 1
    lines = [f"  {'':<13}{'this run':>12}  all {run['number']} runs"] if several else []
    for name in ("pages", "items", "done", "seen"):
        line = f"  {name:<13}{run[name]:>12,}"
        if several:
            line += f"  {totals[name]:>12,}"
        lines.append(line)
    if several and not run["known"]:
        lines.append("  (this run's figures are not recorded: the job was restarted by an "
                     "older version; they include earlier runs)")
    return lines


def _more_lines(report: JobStatus) -> list[str]:
    lines = []
    if report.unserializable:
        lines.append(f"  kept local   {report.unserializable:>12,}  requests refused at enqueue "
                     "(cannot be encoded), crawled on the node that made them (not crash-safe)")
    for name in ("pushed", "filtered", "reclaimed"):
        lines.append(f"  {name:<13}{report.counters.get(name, 0):>12,}")
    return (lines + _results_lines(report.results) + _stats_lines(report.scrapy_stats)
            + _dedup_lines(report.dedup))


def _results_lines(results: dict[str, int]) -> list[str]:
    """The results stream: its entries against its cap, and since when it is full."""
    if not results.get("length") and "cap" not in results:
        return []
    cap = results.get("cap")
    line = f"  results      {results.get('length', 0):>12,}"
    line += f" of {cap:,} (cap)" if cap else ""
    line += f", {results.get('written', 0):,} written"
    lines = [line]
    if "full_since_ms" in results:
        lines.append(f"  results full since {when_iso(results['full_since_ms'])}: nodes lease no "
                     "new work until readers trim the stream")
    return lines


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
    return f"  ETA of the queue now waiting, at this rate: {duration(eta)}"


def duration(seconds: float) -> str:
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
        f"{dedup.get('layout', '')} layer(s), {dedup['bytes']:,} bytes, expected error rate now "
        f"{dedup['expected_error_rate']:.2e} (configured {dedup['configured_error_rate']})"
    )
    if dedup.get("prepared_bytes"):
        lines.append(f"  bloom filter  next layer allocated ahead: "
                     f"{dedup['prepared_bytes']:,} bytes")
    return lines


def job_rows(client: redis.Redis, names: list[str] | None = None) -> list[dict[str, Any]]:
    """One summary per job on this Redis (``names``: of these jobs, as found earlier; a job
    gone since is left out): state, run, queued, done (acked: ``run_done`` in the run under
    way, ``done`` in the job's life), live nodes."""
    rows: list[dict[str, Any]] = []
    for name in job_names(client) if names is None else names:
        try:
            report = JobStore(client, name, node_id="cli", writes_seen=None).status()
        except (StoreUnavailable, AccessRefused):
            raise
        except StoreError as exc:  # one job's keys are not what this version reads
            rows.append({"job": name, "state": "unknown", "error": str(exc), "queued": None,
                         "leased": None, "done": None, "nodes": None, "pages_per_min": None,
                         "finished_at": None, "run": None, "run_done": None})
            continue
        if not report.exists:  # purged between the scan and now
            continue
        run, state = run_summary(report), state_of(report)
        rows.append({
            "job": name, "state": state, "queued": report.queued,
            "run": run["number"], "run_done": run["done"],
            "leased": report.leased, "done": report.counters.get("acked", 0),
            "nodes": sum(1 for n in report.nodes if n["alive"]),
            "pages_per_min": round(pages_per_min(report), 1),
            "finished_at": finished_at(report) if state == "finished" else None,
            **({"partitions": [each.to_dict() for each in report.partitions]}
               if report.split else {}),
        })
    return rows


def print_jobs(rows: list[dict[str, Any]], out: Console) -> None:
    table = Table("job", "state", "run", "queued", "leased", "done this run", "live nodes",
                  "pages/min", "finished")
    unreadable = []
    for row in rows:
        if row["state"] == "unknown":
            unreadable.append(row)
            table.add_row(Text(row["job"]), "unknown", *[""] * 7)
            continue
        table.add_row(Text(row["job"]), row["state"], str(row["run"]), f"{row['queued']:,}",
                      f"{row['leased']:,}", f"{row['run_done']:,}", str(row["nodes"]),
                      f"{row['pages_per_min']:.0f}", row["finished_at"] or "")
    out.print(table)
    for row in rows:
        if row.get("partitions"):
            queued = ", ".join(f"{each['queued']:,}" for each in row["partitions"])
            out.print(f"job {row['job']!r}: {len(row['partitions'])} partitions, queued "
                      f"{queued}", markup=False)
    for row in unreadable:
        out.print(f"job {row['job']!r} cannot be read: {row['error']}", markup=False)
