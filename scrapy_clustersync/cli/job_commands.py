"""``clustersync jobs``, ``status``, ``restart`` and ``purge``: the jobs on a Redis, one job's
figures, and what changes a whole job (``dead`` is in dead_commands.py)."""

from __future__ import annotations

import click

from ..store import JobStore
from ..store.partition_reads import job_frontier, job_sites
from ..store.results_store import ResultsStore
from ..store.script_results import Restarted
from ..store.site_scripts import SITES_SHOWN
from .check_commands import needs_a_person, show_status
from .context import CliContext, pass_cli, reads_only
from .exit_codes import JobRefused, exit_needing_a_person
from .options import all_option, job_argument, json_option, settings_option
from .output import console, echo_json
from .reader_view import readers_dict
from .site_view import sites_dict
from .status_view import job_rows, print_jobs


@click.command()
@json_option("the jobs")
@settings_option
@pass_cli
@reads_only
def jobs(cli: CliContext, as_json: bool) -> None:
    """The jobs on this Redis: state, queued, leased, done, live nodes, pages/min."""
    rows = job_rows(cli.client())
    if as_json:
        echo_json(rows)
    elif rows:
        print_jobs(rows, console())
    else:
        click.echo(f"no jobs on {cli.where()}")


@click.command()
@job_argument
@all_option
@json_option("the status")
@click.option("--check", "check_health", is_flag=True,
              help="Exit 1 when something needs a person: dead nodes holding work, nodes on "
                   "other code or settings, dead letters (for cron and monitoring).")
@click.option("--sites", "top_sites", type=click.IntRange(min=1), is_flag=False,
              flag_value=SITES_SHOWN, default=None,
              help=f"Also show the queue's deepest sites (requests queued, ready or when they "
                   f"may start) and the sites' politeness budgets for the cluster: delay in "
                   f"force, backoff, in flight, next turn; N of each ({SITES_SHOWN} unless told).")
@settings_option
@pass_cli
@reads_only
def status(cli: CliContext, job: str | None, every: bool, as_json: bool,
           check_health: bool, top_sites: int | None) -> None:
    """State, figures of the run under way (and the job's totals beside them), queued, leased,
    rate, dead letters and the nodes of this run of JOB (--all: every node)."""
    store = cli.store(job)
    report = store.status()
    if not report.exists:
        cli.not_found(store.keys.job)
    attention = needs_a_person(store, report) if check_health else None
    sites = None
    if top_sites is not None:
        count = len(report.partitions)
        sites = sites_dict(*job_sites(store.client, store.keys, top_sites, count),
                           job_frontier(store.client, store.keys, top_sites, count))
    results = ResultsStore(store.client, store.keys)
    readers = readers_dict(results.groups(), results.length())
    show_status(report, attention, as_json, every, sites, readers)
    if attention:
        exit_needing_a_person()


@click.command()
@job_argument
@click.option("--yes", is_flag=True, help="Confirm: delete every key of JOB.")
@json_option("what was deleted")
@settings_option
@pass_cli
def purge(cli: CliContext, job: str | None, yes: bool, as_json: bool) -> None:
    """Delete JOB from Redis: queue, leases, seen record, stats, nodes, dead letters."""
    if not yes:
        # refused before any Redis is reached when JOB is named
        named = repr(job) if job else "the job"
        raise click.UsageError(
            f"purge deletes {named} for every node; run again with --yes to confirm")
    store = cli.existing_store(job)
    deleted = store.purge()
    if as_json:
        echo_json({"job": store.keys.job, "deleted_keys": deleted})
    else:
        click.echo(f"purged job {store.keys.job!r} ({deleted} keys deleted)")


@click.command()
@job_argument
@click.option("--forget-seen", is_flag=True,
              help="Also clear the seen record: every URL is crawled again (default: only URLs "
                   "not seen before, and start requests marked dont_filter).")
@click.option("--force", is_flag=True,
              help="Restart even with nodes alive or work queued or leased.")
@click.option("--yes", is_flag=True, help="Confirm --forget-seen without asking.")
@json_option("what was done")
@settings_option
@pass_cli
def restart(cli: CliContext, job: str | None, forget_seen: bool, force: bool, yes: bool,
            as_json: bool) -> None:
    """Make finished (or stopped) JOB crawlable again: start() runs on the next node, and a
    stopped (or paused) job is running again.

    The queue, stats and dead letters are kept; the seen record too unless --forget-seen, so
    only URLs not seen before are fetched, but for start requests marked dont_filter (as
    Scrapy's start_urls are): those are fetched again.
    """
    if forget_seen and not yes:
        raise click.UsageError("--forget-seen clears what the job has seen, so that every URL is "
                               "crawled again; run again with --yes to confirm")
    store = cli.existing_store(job)
    name = store.keys.job
    result = store.restart(force=force, forget_seen=forget_seen)
    if not result.done:
        raise JobRefused(restart_refusal(store, result))
    if as_json:
        echo_json({"job": name, "restarted": True, "forgot_seen": forget_seen,
                   "resumed_from": result.resumed or None})
        return
    click.echo(restart_summary(name, forget_seen, result.resumed))


def restart_refusal(store: JobStore, result: Restarted) -> str:
    """Why ``restart`` refused the job, and what to do (the CLI's and the HTTP API's words)."""
    name = store.keys.job
    stopped = store.control_state().state in ("stopped", "stopping")
    hint = (f" `clustersync resume {name}` continues its queue without running start() "
            "again." if stopped and result.queued + result.leased else "")
    return (f"job {name!r} is not finished: {result.live_nodes} live node(s), {result.queued} "
            f"queued, {result.leased} leased. Stop its nodes and wait for their leases to run "
            f"out, or pass --force to restart it anyway.{hint}")


def restart_summary(job: str, forget_seen: bool, resumed: str) -> str:
    """What ``restart`` did, for people."""
    was = f"; it was {resumed} and runs again" if resumed else ""
    seen = ("the seen record was cleared: every URL is crawled again" if forget_seen else
            "the seen record is kept: only URLs not seen before are crawled, and start "
            "requests marked dont_filter (start_urls) are fetched again")
    return f"restarted job {job!r}: start() runs again on the next node{was}; {seen}"
