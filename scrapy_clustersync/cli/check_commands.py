"""``clustersync check``, ``nodes`` and ``top``, and what ``status --check`` finds: the job's
invariants and its nodes, for people and for cron and monitoring."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from ..store import JobStatus, JobStore
from ..store.consistency import Finding, JobCheck
from ..store.node_differences import node_differences
from .context import CliContext, pass_cli
from .exit_codes import exit_needing_a_person
from .options import job_argument, json_option, settings_option
from .output import console, echo_json
from .status_view import print_status, status_dict, summary_lines


@click.command()
@job_argument
@click.option("--repair", is_flag=True,
              help="Mend what can be mended safely (each finding is confirmed atomically first).")
@click.option("--deep", is_flag=True,
              help="List every entry even when the counts add up (slow on a big job).")
@json_option("the findings")
@settings_option
@pass_cli
def check(cli: CliContext, job: str | None, repair: bool, deep: bool, as_json: bool) -> None:
    """Verify JOB's invariants (leases, queue, entries, counts, nodes' code and settings);
    safe while the cluster crawls. Exit 1 if something is wrong and was not mended."""
    store = cli.existing_store(job)
    findings = JobCheck(store).run(repair=repair, deep=deep)
    left = [f for f in findings if not f.action]
    if as_json:
        echo_json({"job": store.keys.job, "findings": [f.to_dict() for f in findings],
                   "left": len(left)})
    else:
        _print_findings(store.keys.job, findings, repair, console())
    if left:
        exit_needing_a_person()


def _print_findings(job: str, findings: list[Finding], repair: bool, out: Console) -> None:
    if not findings:
        out.print(f"job {job!r}: every invariant holds", markup=False)
        return
    for finding in findings:
        done = f" -> {finding.action}" if finding.action else (
            " (not mended: see below)" if repair else "")
        out.print(f"{finding.kind:<24} {finding.subject}: {finding.detail}{done}", markup=False)
    left = sum(1 for f in findings if not f.action)
    mended = len(findings) - left
    out.print(f"job {job!r}: {len(findings)} finding(s), {mended} mended, {left} left"
              + ("" if repair else "; `clustersync check --repair` mends entry findings"),
              markup=False)


def needs_a_person(store: JobStore, report: JobStatus) -> list[str]:
    """What ``status --check`` reports: dead nodes holding work, the settings, files or versions
    that differ between live nodes (which, and on which nodes), dead letters."""
    found = []
    held = JobCheck(store).leases_of_dead_nodes()
    for node, count in sorted(held.items()):
        found.append(f"node {node} is not alive and still holds {count} lease(s)")
    live = {n["id"]: n for n in report.nodes if n["alive"]}
    found += [difference.line() for difference in node_differences(live)]
    if report.dead_letters:
        found.append(f"{report.dead_letters} dead letter(s): `clustersync dead` lists them")
    return found


def show_status(report: JobStatus, attention: list[str] | None, as_json: bool) -> None:
    """The status; with ``attention`` (``status --check``) what needs a person, or that
    nothing does."""
    if as_json:
        summary = status_dict(report)
        if attention is not None:
            summary["needs_attention"] = attention
        echo_json(summary)
        return
    out = console()
    print_status(report, out)
    for line in attention or []:
        out.print(f"needs attention: {line}", markup=False)
    if attention == []:
        out.print("check: nothing needs a person", markup=False)


@click.command()
@job_argument
@json_option("the node records")
@settings_option
@pass_cli
def nodes(cli: CliContext, job: str | None, as_json: bool) -> None:
    """JOB's nodes: live and dead, state, resources, load, work held, versions."""
    report = cli.existing_store(job).status()
    if as_json:
        echo_json(report.nodes)
    else:
        console().print(nodes_table(report.nodes))


def nodes_table(records: list[dict[str, Any]]) -> Table:
    table = Table("node", "alive", "state", "host", "pid", "cpu %", "rss MiB", "load",
                  "concurrency", "inflight", "leased", "prefetched", "buffered", "pages",
                  "items", "errors", "pages/min", "versions", "digest", "seen ago")
    for node in records:
        load = node.get("load_avg") or []
        versions = node.get("versions") or {}
        table.add_row(
            str(node["id"]), "yes" if node.get("alive") else "no", str(node.get("state", "?")),
            str(node.get("host", "")), str(node.get("pid", "")),
            f"{float(node.get('cpu_percent', 0)):.0f}",
            f"{int(node.get('rss_bytes', 0)) / 2**20:.0f}",
            " ".join(f"{float(x):.1f}" for x in load[:1]),
            str(node.get("concurrency", "")), str(node.get("inflight", 0)),
            str(node.get("leased", "")), str(node.get("prefetched", "")),
            str(node.get("buffered", 0)), str(node.get("pages", 0)), str(node.get("items", 0)),
            str(node.get("errors", "")), f"{float(node.get('pages_per_min', 0)):.0f}",
            " ".join(f"{k} {v}" for k, v in sorted(versions.items())),
            str(node.get("digest", ""))[:12],
            f"{time.time() - float(node.get('updated', time.time())):.0f}s",
        )
    return table


@click.command()
@job_argument
@click.option("--interval", default=2.0, show_default=True, help="Seconds between refreshes.")
@click.option("-n", "--count", "count", type=click.IntRange(min=1), default=None,
              help="Stop after this many refreshes (default: until Ctrl-C).")
@json_option("the status, one line per refresh,")
@settings_option
@pass_cli
def top(cli: CliContext, job: str | None, interval: float, count: int | None,
        as_json: bool) -> None:
    """JOB's status and nodes, refreshed live like `top` (Ctrl-C to leave)."""
    store = cli.existing_store(job)
    try:
        if as_json:
            _top_lines(store, interval, count)
        else:
            _top_live(store, interval, count)
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


def _top_live(store: JobStore, interval: float, count: int | None) -> None:
    with Live(console=console(), auto_refresh=False) as live:
        for _ in _refreshes(interval, count):
            live.update(_top_view(store), refresh=True)


def _top_lines(store: JobStore, interval: float, count: int | None) -> None:
    """One JSON document per refresh, a line each (for ``jq`` and log shippers)."""
    for _ in _refreshes(interval, count):
        echo_json(status_dict(store.status()), one_line=True)


def _top_view(store: JobStore) -> Group:
    report = store.status()
    summary = status_dict(report)
    return Group(*summary_lines(report, summary), nodes_table(report.nodes))
