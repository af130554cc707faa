"""``clustersync check`` and ``nodes``, and what ``status --check`` finds: the job's
invariants and its nodes, for people and for cron and monitoring."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from ..store import JobStatus, JobStore
from ..store.consistency import Finding, check_job, leases_of_dead_nodes
from ..store.node_differences import node_differences
from ..store.results_store import ResultsStore
from ..store.shared_settings import SharedSettingsStore
from .context import CliContext, pass_cli, reads_only
from .exit_codes import exit_needing_a_person
from .node_sites import print_node_sites
from .node_view import group_nodes, hidden_line, node_table
from .options import all_option, job_argument, json_option, settings_option
from .output import console, echo_json
from .reader_view import print_readers, readers_dict
from .settings_lag import job_settings_version, lagging_lines
from .site_view import print_sites
from .status_view import print_status, status_dict


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
    findings = check_job(store, repair=repair, deep=deep)
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
        where = f" (partition {finding.partition})" if finding.partition else ""
        out.print(f"{finding.kind:<24} {finding.subject}{where}: {finding.detail}{done}",
                  markup=False)
    left = sum(1 for f in findings if not f.action)
    mended = len(findings) - left
    out.print(f"job {job!r}: {len(findings)} finding(s), {mended} mended, {left} left"
              + ("" if repair else "; `clustersync check --repair` mends entry findings"),
              markup=False)


def needs_a_person(store: JobStore, report: JobStatus) -> list[str]:
    """What ``status --check`` reports: dead nodes holding work, the settings, files or versions
    that differ between live nodes (which, and on which nodes), live nodes behind the job's
    shared settings, dead letters."""
    found = []
    held = leases_of_dead_nodes(store)
    for node, count in sorted(held.items()):
        found.append(f"node {node} is not alive and still holds {count} lease(s)")
    live = {n["id"]: n for n in report.nodes if n["alive"]}
    shared = SharedSettingsStore(store.client, store.keys).names()
    found += [difference.line() for difference in node_differences(live, shared)]
    found += lagging_lines(live.values(), job_settings_version(report.meta))
    if report.dead_letters:
        found.append(f"{report.dead_letters} dead letter(s): `clustersync dead` lists them")
    return found + full_stream_lines(store, report)


def full_stream_lines(store: JobStore, report: JobStatus) -> list[str]:
    """While the results stream is full (the nodes pause): the reader groups holding it back,
    furthest behind first (reader_view.READERS_SHOWN at most)."""
    if "full_since_ms" not in report.results:
        return []
    groups = readers_dict(ResultsStore(store.client, store.keys).groups(), 0)["groups"]
    if not groups:
        return ["the results stream is full and no reader group reads it: the nodes pause until "
                "one does (docs/results-readers.md)"]
    return [f"the results stream is full: reader group {g['group']!r} has {g['lag']:,} "
            "results to acknowledge (`clustersync readers --delete` removes a group given up)"
            for g in groups if g["lag"]]


def holding_back(report: JobStatus, readers: dict[str, Any] | None) -> list[str] | None:
    """While the results stream is full (the nodes pause): the reader groups that hold it back
    (each has results to acknowledge), furthest behind first; None while it is not full or
    the groups are not known."""
    if "full_since_ms" not in report.results or readers is None:
        return None
    return [group["group"] for group in readers["groups"] if group["lag"]]


def held_back_line(holders: list[str]) -> str:
    if not holders:
        return ("  results full: no reader group reads the stream; the nodes pause until one "
                "does")
    names = ", ".join(repr(name) for name in holders)
    return (f"  results full: held back by reader group(s) {names}, not acknowledging "
            "(`clustersync readers --delete` removes a group given up)")


def echo_status_json(report: JobStatus, holders: list[str] | None,
                     extras: dict[str, Any]) -> None:
    """``status --json``: ``status_dict``, ``results.held_back_by`` while the stream is full,
    and the ``extras`` given (those not None)."""
    summary = status_dict(report)
    if holders is not None:
        summary["results"] = {**summary["results"], "held_back_by": holders}
    summary.update({name: value for name, value in extras.items() if value is not None})
    echo_json(summary)


def show_status(report: JobStatus, attention: list[str] | None, as_json: bool,
                every: bool = False, sites: dict[str, Any] | None = None,
                readers: dict[str, Any] | None = None) -> None:
    """The status; with ``attention`` (``status --check``) what needs a person, or that
    nothing does; ``every``: list every node (``--all``); ``sites``: ``site_view.sites_dict``
    (``--sites``); ``readers``: ``reader_view.readers_dict``."""
    holders = holding_back(report, readers)
    if as_json:
        echo_status_json(report, holders, {"readers": readers, "needs_attention": attention,
                                           "sites": sites})
        return
    out = console()
    print_status(report, out, every)
    if holders is not None:
        out.print(held_back_line(holders), markup=False)
    if readers is not None:
        print_readers(readers, out)
    if sites is not None:
        print_sites(sites, out)
    for line in attention or []:
        out.print(f"needs attention: {line}", markup=False)
    if attention == []:
        out.print("check: nothing needs a person", markup=False)


@click.command()
@job_argument
@all_option
@click.option("--sites", "show_sites", is_flag=True,
              help="Also list, for each node, the sites it paces: the delay in force, backoff, "
                   "block (Retry-After) and its requests in flight, busiest first.")
@json_option("the node records")
@settings_option
@pass_cli
@reads_only
def nodes(cli: CliContext, job: str | None, every: bool, show_sites: bool,
          as_json: bool) -> None:
    """JOB's nodes of the run under way: state, resources, load, work held, the sites each
    paces, versions; the nodes of earlier runs and those dead for long are summed up in a line
    (--all lists them). The columns that fit the terminal are shown, the node, state,
    pages/min, pages and work held first; piped, all of them."""
    report = cli.existing_store(job).status()
    groups = group_nodes(report)
    if as_json:  # every node, each with its group: scripts choose
        echo_json(groups.tagged())
        return
    out = console()
    out.print(node_table(groups.listed(every), out.width))
    hidden = hidden_line(groups, every)
    if hidden:
        out.print(hidden, markup=False, highlight=False)
    if show_sites:
        print_node_sites(groups.listed(every), out)
