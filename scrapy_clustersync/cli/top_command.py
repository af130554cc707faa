"""``clustersync top``: a job's status and nodes, refreshed live, in the terminal's width.

A job that does not exist yet is waited for (said so, refreshed) rather than refused: ``top``
may be started before the first node. Text from Redis is printed as ``Text``, never markup.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Group
from rich.live import Live
from rich.text import Text

from ..store import JobStatus, JobStore
from .context import CliContext, pass_cli, reads_only
from .node_view import group_nodes, hidden_line, node_table
from .options import all_option, job_argument, json_option, settings_option
from .output import console, echo_json
from .status_view import duration, headline, status_dict

#: the columns of top's node table, by rank where the terminal is narrow (node_view.py)
TOP_COLUMNS = ("node", "state", "pages/min", "pages", "held", "items", "errors", "buffered",
               "cpu %", "rss MiB", "host", "seen ago", "versions")


@click.command()
@job_argument
@click.option("--interval", default=2.0, show_default=True, help="Seconds between refreshes.")
@click.option("-n", "--count", "count", type=click.IntRange(min=1), default=None,
              help="Stop after this many refreshes (default: until Ctrl-C).")
@all_option
@json_option("the status, one line per refresh,")
@settings_option
@pass_cli
@reads_only
def top(cli: CliContext, job: str | None, interval: float, count: int | None, every: bool,
        as_json: bool) -> None:
    """JOB's status and nodes, refreshed live like `top` (Ctrl-C to leave), in the terminal's
    width. A JOB that does not exist yet is waited for."""
    store = cli.store(job)
    where = cli.where()
    try:
        if as_json:
            _top_lines(store, interval, count)
        else:
            _top_live(store, interval, count, every, where)
    except KeyboardInterrupt:
        pass


def _refreshes(interval: float, count: int | None) -> Iterator[int]:
    """0, 1, 2 ... (``count`` of them, or forever), ``interval`` seconds apart."""
    shown = 0
    while count is None or shown < count:
        if shown:
            time.sleep(interval)
        yield shown
        shown += 1


def _top_live(store: JobStore, interval: float, count: int | None, every: bool,
              where: str) -> None:
    out = console()
    with Live(console=out, auto_refresh=False, vertical_overflow="crop") as live:
        for _ in _refreshes(interval, count):
            report = store.status()
            view = (top_view(report, out.width, every) if report.exists
                    else _waiting(store.keys.job, where, interval))
            live.update(view, refresh=True)


def _top_lines(store: JobStore, interval: float, count: int | None) -> None:
    """One JSON document per refresh, a line each (for ``jq`` and log shippers); a job not
    there yet is ``{"job": ..., "exists": false, "state": "absent"}``."""
    for _ in _refreshes(interval, count):
        report = store.status()
        if report.exists:
            echo_json(status_dict(report), one_line=True)
        else:
            echo_json({"job": store.keys.job, "exists": False, "state": "absent"},
                      one_line=True)


def _waiting(job: str, where: str, interval: float) -> Text:
    return Text(f"job {job!r} does not exist yet on {where}: waiting for it (refreshed "
                f"every {interval:g}s; Ctrl-C to leave)")


def top_view(report: JobStatus, width: int, every: bool = False) -> Group:
    """A few summary lines, then the nodes of this run in ``width`` columns."""
    summary = status_dict(report)
    groups = group_nodes(report)
    parts: list[Any] = [headline(report, summary), *_figures(summary),
                        node_table(groups.listed(every), width, TOP_COLUMNS)]
    hidden = hidden_line(groups, every)
    if hidden:
        parts.append(Text(hidden))
    return Group(*parts)


def _figures(summary: dict[str, Any]) -> list[Text]:
    """Two lines: the work (queued, leased, dead letters, rate, ETA), then this run's figures
    with the job's totals beside them once it has had more than one run."""
    run, totals = summary["run"], summary["totals"]
    eta = f"  ETA {duration(summary['eta_s'])}" if summary["eta_s"] is not None else ""
    work = (f"queued {summary['queued']:,}  leased {summary['leased']:,}  dead letters "
            f"{summary['dead_letters']:,}  pages/min {summary['pages_per_min']:,.0f}{eta}")
    several = run["number"] > 1
    figures = "  ".join(
        f"{name} {run[name]:,}" + (f" ({totals[name]:,} all runs)" if several else "")
        for name in ("pages", "done", "seen"))
    lines = [Text(work), Text(("this run: " if several else "") + figures)]
    if len(summary.get("partitions", ())) > 1:
        lines.append(Text("partitions: " + "  ".join(
            f"{each['partition']}: queued {each['queued']:,} leased {each['leased']:,}"
            + (f" on {each['primary']}" if each["primary"] else "")
            for each in summary["partitions"])))
    return lines

