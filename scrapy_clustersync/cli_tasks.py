"""What ``clustersync task``, ``tasks`` and ``failed`` print: for people (a table) and for
scripts (``--json``). The reads are store/tasks.py's."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from .store.tasks import FailedRequest, TaskRecord


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
