"""``clustersync task``, ``tasks`` and ``failed``: for people (a table) and for scripts
(``--json``). The reads are store/task_records.py's. Task ids, URLs and errors are Redis text:
printed as ``Text``, never as rich markup."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..store.task_records import (
    TASK_STATES,
    FailedRequest,
    TaskRecord,
    job_control,
    read_failed,
    read_task,
    read_tasks,
)
from .context import CliContext, pass_cli, reads_only
from .exit_codes import JobRefused
from .options import job_argument, json_option, limit_option, settings_option
from .output import console, echo_json
from .output import when_iso as when


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


def plain(*values: object) -> list[Text]:
    """Table cells that show ``values`` as they are: text from Redis is never rich markup."""
    return [Text(str(value)) for value in values]


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
        table.add_row(*plain(record.task, record.shown_state(control), record.requests,
                             record.open, record.failed, when(record.ended_ms),
                             failure_text(record.failure)))
    out.print(table)


def print_failed(failed: list[FailedRequest], out: Console) -> None:
    table = Table("when", "url", "status", "error", "attempts", "errback", "task", "node")
    for each in failed:
        table.add_row(*plain(when(each.at_ms), each.url, each.status or "", each.error,
                             each.attempts or "", "yes" if each.errback else "no",
                             each.task or "", each.node))
    out.print(table)


def _job_and_task(args: tuple[str, ...]) -> tuple[str | None, str]:
    """JOB and ID of ``task [JOB] ID``: one argument is the ID, of the job the others use."""
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        return args[0], args[1]
    raise click.UsageError(f"task takes [JOB] ID, got {len(args)} argument(s)")


@click.command()
@click.argument("args", nargs=-1, metavar="[JOB] ID")
@json_option("the task")
@settings_option
@pass_cli
@reads_only
def task(cli: CliContext, args: tuple[str, ...], as_json: bool) -> None:
    """State of task ID of JOB (meta["clustersync_task"]): pending, running, success, failed,
    paused or terminated, with its counts and its first failure."""
    job, task_id = _job_and_task(args)
    store = cli.existing_store(job)
    record, control = read_task(store, task_id), job_control(store)
    if record is None:
        raise JobRefused(
            f"job {store.keys.job!r} has no task {task_id!r} (no request with "
            f"meta['clustersync_task'] = {task_id!r} reached Redis); `clustersync tasks "
            f"{store.keys.job}` lists its tasks")
    if as_json:
        echo_json(record.to_dict(control))
    else:
        print_task(record, control, console())


@click.command()
@job_argument
@click.option("--state", "states", multiple=True, type=click.Choice(TASK_STATES),
              help="Only tasks in this state (may be repeated).")
@json_option("the tasks")
@settings_option
@pass_cli
@reads_only
def tasks(cli: CliContext, job: str | None, states: tuple[str, ...], as_json: bool) -> None:
    """The tasks of JOB, sorted by id."""
    store = cli.existing_store(job)
    records, control = read_tasks(store), job_control(store)
    records = [r for r in records if not states or r.shown_state(control) in states]
    if as_json:
        echo_json([r.to_dict(control) for r in records])
    else:
        print_tasks(records, control, console())
        click.echo(f"{len(records)} task(s)")


@click.command()
@job_argument
@limit_option("failed requests")
@json_option("them")
@settings_option
@pass_cli
@reads_only
def failed(cli: CliContext, job: str | None, limit: int, as_json: bool) -> None:
    """JOB's newest failed requests (CLUSTERSYNC_FAILED_KEEP are kept): URL, HTTP status,
    error, attempts, task, node and when."""
    records = read_failed(cli.existing_store(job), limit)
    if as_json:
        echo_json([r.to_dict() for r in records])
    else:
        print_failed(records, console())
        click.echo(f"{len(records)} failed request(s) shown")
