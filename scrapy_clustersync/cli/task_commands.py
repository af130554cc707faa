"""``clustersync task``, ``tasks`` and ``failed``: for people (a table) and for scripts
(``--json``). The reads are store/tasks.py's; cli.py registers the commands (TASK_COMMANDS)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..store import StoreError
from ..store.task_records import (
    TASK_STATES,
    FailedRequest,
    TaskRecord,
    job_control,
    read_failed,
    read_task,
    read_tasks,
)
from .status_view import console


def _cli() -> ModuleType:
    """cli.py, for the job lookup and errors every command shares (imported when a command
    runs: cli.py imports this module)."""
    from . import app as cli

    return cli


def when(ms: int | None) -> str:
    """Server ms as ISO 8601 UTC, "" for None."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds")


def failure_text(failure: dict[str, Any] | None) -> str:
    """A task's first failure in one line: error, status, attempts, URL, node."""
    if not failure:
        return ""
    parts = [str(failure.get("error", "?"))]
    if failure.get("attempts"):
        parts.append(f"after {failure['attempts']} attempt(s)")
    if failure.get("url"):
        parts.append(f"at {failure['url']}")
    if failure.get("node"):
        parts.append(f"on {failure['node']}")
    return " ".join(parts)


def print_task(record: TaskRecord, control: str | None, out: Console) -> None:
    """One task, a line per field."""
    rows = [("task", record.task), ("state", record.shown_state(control)),
            ("requests", f"{record.requests} ({record.open} open, {record.done} done, "
                         f"{record.failed} failed, {record.filtered} filtered as seen)"),
            ("created", when(record.created_ms)), ("started", when(record.started_ms)),
            ("ended", when(record.ended_ms)), ("last change", f"{when(record.updated_ms)} "
                                                              f"by {record.node or '?'}")]
    if record.failure:
        rows.append(("failure", failure_text(record.failure)))
        if record.failure.get("at_ms"):
            rows.append(("failed at", when(int(record.failure["at_ms"]))))
    for name, value in rows:
        out.print(f"{name:>12}  {value}", markup=False, highlight=False)


def print_tasks(records: list[TaskRecord], control: str | None, out: Console) -> None:
    table = Table("task", "state", "requests", "open", "failed", "ended", "failure")
    for record in records:
        table.add_row(record.task, record.shown_state(control), str(record.requests),
                      str(record.open), str(record.failed), when(record.ended_ms),
                      failure_text(record.failure))
    out.print(table)


def print_failed(failed: list[FailedRequest], out: Console) -> None:
    table = Table("when", "url", "status", "error", "attempts", "errback", "task", "node")
    for each in failed:
        table.add_row(when(each.at_ms), each.url, str(each.status or ""), each.error,
                      str(each.attempts or ""), "yes" if each.errback else "no",
                      each.task or "", each.node)
    out.print(table)


@click.command()
@click.argument("job")
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@click.pass_context
def task(ctx: click.Context, job: str, task_id: str, as_json: bool) -> None:
    """State of task ID of JOB (meta["clustersync_task"]): pending, running, success, failed,
    paused or terminated, with its counts and its first failure."""
    store = _cli()._existing_store(ctx, job)
    try:
        record, control = read_task(store, task_id), job_control(store)
    except StoreError as exc:
        _cli()._fail(exc, ctx)
    if record is None:
        raise click.ClickException(
            f"job {store.keys.job!r} has no task {task_id!r} (no request with "
            f"meta['clustersync_task'] = {task_id!r} reached Redis); `clustersync tasks "
            f"{store.keys.job}` lists its tasks")
    if as_json:
        click.echo(json.dumps(record.to_dict(control), indent=2, sort_keys=True))
    else:
        print_task(record, control, console())


@click.command()
@click.argument("job", required=False)
@click.option("--state", "states", multiple=True, type=click.Choice(TASK_STATES),
              help="Only tasks in this state (may be repeated).")
@click.option("--json", "as_json", is_flag=True, help="Print the tasks as JSON.")
@click.pass_context
def tasks(ctx: click.Context, job: str | None, states: tuple[str, ...], as_json: bool) -> None:
    """The tasks of JOB (default: the project's CLUSTERSYNC_JOB), sorted by id."""
    store = _cli()._existing_store(ctx, job)
    try:
        records, control = read_tasks(store), job_control(store)
    except StoreError as exc:
        _cli()._fail(exc, ctx)
    records = [r for r in records if not states or r.shown_state(control) in states]
    if as_json:
        click.echo(json.dumps([r.to_dict(control) for r in records], indent=2, sort_keys=True))
    else:
        print_tasks(records, control, console())
        click.echo(f"{len(records)} task(s)")


@click.command()
@click.argument("job", required=False)
@click.option("--limit", default=50, show_default=True, help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@click.pass_context
def failed(ctx: click.Context, job: str | None, limit: int, as_json: bool) -> None:
    """JOB's newest failed requests (CLUSTERSYNC_FAILED_KEEP are kept): URL, HTTP status,
    error, attempts, task, node and when."""
    try:
        records = read_failed(_cli()._existing_store(ctx, job), limit)
    except StoreError as exc:
        _cli()._fail(exc, ctx)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records], indent=2, sort_keys=True))
    else:
        print_failed(records, console())
        click.echo(f"{len(records)} failed request(s) shown")


TASK_COMMANDS = (task, tasks, failed)
