"""The job's tasks and failed requests, read back: the formats lua/tasks.lua writes, and the
reads of ``clustersync task``, ``tasks`` and ``failed``.

Both are JSON objects written by the scripts (one place in the Lua: ``task_save`` and
``failed_record``). Readers take every field but the counts as optional.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import StoreError, translate_errors
from .records import FormatError, as_text

if TYPE_CHECKING:
    from .job_store import JobStore

#: task states the scripts store; "paused" and "terminated" are shown, never stored (see
#: ``shown_state``)
STORED_STATES = ("pending", "running", "success", "failed")
TASK_STATES = (*STORED_STATES, "paused", "terminated")
#: the job's control state (meta field ``control``, written by `clustersync pause/stop`) ->
#: what a task that is not finished shows then
CONTROL_SHOWS = {"paused": "paused", "stopping": "terminated", "stopped": "terminated"}
SCAN_COUNT = 500


def _object(value: str | bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(as_text(value))
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise FormatError(f"{what} {value!r:.100} is not a JSON object")
    return data


@dataclass(frozen=True)
class FailedRequest:
    """One item of the failed list: a request that failed (see request_tasks.py for what counts).

    ``status``: the HTTP status, None without a response; ``error``: the exception (class and
    message) or "HTTP <status>"; ``attempts``: downloads tried, None if unknown; ``at_ms``:
    Redis server time; ``task``: its task id, None if it had none.
    """

    url: str
    node: str
    at_ms: int
    error: str
    status: int | None = None
    attempts: int | None = None
    errback: bool = False
    task: str | None = None
    entry: str = ""

    @classmethod
    def parse(cls, value: str | bytes) -> FailedRequest:
        data = _object(value, "failed request")
        try:
            return cls(str(data["url"]), str(data["node"]), int(data["at_ms"]),
                       str(data["error"]), _int_or_none(data.get("status")),
                       _int_or_none(data.get("attempts")), bool(data.get("errback")),
                       _str_or_none(data.get("task")), str(data.get("entry", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"failed request {value!r:.100} lacks {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "node": self.node, "at_ms": self.at_ms, "error": self.error,
                "status": self.status, "attempts": self.attempts, "errback": self.errback,
                "task": self.task, "entry": self.entry}


@dataclass(frozen=True)
class TaskRecord:
    """A task's record: its stored state and counts, and the first failure, if any.

    ``requests``: entries pushed for it; ``open``: of those, queued or leased now; ``done``:
    settled (``failed`` of them failed); ``filtered``: pushes dedup dropped; times are Redis
    server ms; ``node``: the node of the last change.
    """

    task: str
    state: str
    requests: int
    open: int
    done: int
    failed: int
    filtered: int
    created_ms: int | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    updated_ms: int | None = None
    node: str | None = None
    failure: dict[str, Any] | None = field(default=None)

    @classmethod
    def parse(cls, task: str, value: str | bytes) -> TaskRecord:
        data = _object(value, f"task {task!r} record")
        try:
            counts = [int(data.get(name, 0)) for name in
                      ("requests", "open", "done", "failed", "filtered")]
            times = [_int_or_none(data.get(name)) for name in
                     ("created_ms", "started_ms", "ended_ms", "updated_ms")]
        except (TypeError, ValueError) as exc:
            raise FormatError(f"task {task!r} record {value!r:.100}: {exc}") from None
        failure = data.get("failure")
        requests, open_, done, failed, filtered = counts
        created, started, ended, updated = times
        return cls(task, str(data.get("state", "?")), requests, open_, done, failed, filtered,
                   created, started, ended, updated, _str_or_none(data.get("node")),
                   failure if isinstance(failure, dict) else None)

    def shown_state(self, control: str | None) -> str:
        """The state to show: a task not finished is "paused" or "terminated" with its job
        (``control``: the job's meta field of that name, "running" or None when not set)."""
        if self.state in ("pending", "running"):
            return CONTROL_SHOWS.get(control or "", self.state)
        return self.state

    def to_dict(self, control: str | None = None) -> dict[str, Any]:
        return {"task": self.task, "state": self.shown_state(control),
                "stored_state": self.state, "requests": self.requests, "open": self.open,
                "done": self.done, "failed": self.failed, "filtered": self.filtered,
                "created_ms": self.created_ms, "started_ms": self.started_ms,
                "ended_ms": self.ended_ms, "updated_ms": self.updated_ms, "node": self.node,
                "failure": self.failure}


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _parsed(store: JobStore, parse: Any, *args: Any) -> Any:
    """``parse(*args)``; a StoreError naming the job if another program wrote the value."""
    try:
        return parse(*args)
    except FormatError as exc:
        raise StoreError(f"job {store.keys.job!r} holds {exc}") from None


def job_control(store: JobStore) -> str | None:
    """The job's control state (running, paused, stopping, stopped), None if never set."""
    with translate_errors(store.client):
        value = store.client.hget(store.keys.meta, "control")
    return None if value is None else as_text(value)


def read_task(store: JobStore, task: str) -> TaskRecord | None:
    """Task ``task``'s record, None if the job has no such task."""
    with translate_errors(store.client):
        value = store.client.hget(store.keys.tasks, task)
    return None if value is None else _parsed(store, TaskRecord.parse, task, value)


def read_tasks(store: JobStore) -> list[TaskRecord]:
    """Every task of the job, sorted by id; read with HSCAN, so that a job of many tasks never
    blocks Redis."""
    with translate_errors(store.client):
        records = [_parsed(store, TaskRecord.parse, as_text(name), value) for name, value in
                   store.client.hscan_iter(store.keys.tasks, count=SCAN_COUNT)]
    return sorted(records, key=lambda record: record.task)


def read_failed(store: JobStore, limit: int) -> list[FailedRequest]:
    """The job's ``limit`` newest failed requests, newest first."""
    with translate_errors(store.client):
        values = store.client.lrange(store.keys.failed, 0, limit - 1)
    return [_parsed(store, FailedRequest.parse, value) for value in values]
