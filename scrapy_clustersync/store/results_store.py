"""Reading the job's ``results`` stream: with a cursor (``export``), and in consumer groups
(``consume``, ``sink``, ``results.reader.ResultReader``) that acknowledge what they processed
and trim what every group acknowledged (lua/results_ack.lua).

Entries come out raw, ``(stream id, fields)``; results/record_format.py decodes them (this
layer knows the stream, not the format). A reader group is a Redis consumer group on the
stream, created at id 0 (it reads every result the stream still holds) with MKSTREAM (a group
may be registered before the first result is written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .control_state import STOPPED, STOPPING, ControlState
from .errors import StoreError, translate_errors
from .job_status import read_status
from .keys import JobKeys
from .records import as_text
from .script_base import JobScript
from .script_results import FinishedRun, JobStatus

#: one raw stream entry: its id and its fields (None for an entry deleted while pending)
Entry = tuple[str, "dict[bytes, bytes] | None"]


class ResultsAckScript(JobScript):
    """results_ack.lua: ``run`` acknowledges ids for a group and trims the stream to what some
    group has not acknowledged; answers (acked, trimmed)."""

    FILE = "results_ack"
    KEYS = ("results",)
    ARGV = ("group",)
    ARGV_TAIL = "id"

    def call(self, group: str, ids: Sequence[str]) -> tuple[list[str], list[Any]]:
        return [self.keys.results], [group, *ids]

    def run(self, group: str, ids: Sequence[str]) -> tuple[int, int]:
        acked, trimmed = self._call(*self.call(group, ids))
        return int(acked), int(trimmed)


@dataclass(frozen=True)
class GroupState:
    """One reader group as XINFO GROUPS shows it: ``lag`` entries not delivered to it yet
    (None if Redis cannot tell: ``undelivered`` is then counted, at most LAG_COUNTED_AT_MOST),
    ``pending`` delivered and not acknowledged."""

    name: str
    consumers: int
    pending: int
    lag: int | None
    last_delivered: str

    @property
    def behind(self) -> int:
        """Results the group has not acknowledged: not delivered yet, plus pending."""
        return (self.lag or 0) + self.pending


#: when Redis does not know a group's lag, it is counted with XRANGE up to this many entries
LAG_COUNTED_AT_MOST = 10_000


def _entries(reply: Any) -> list[Entry]:
    return [(as_text(sid), fields) for sid, fields in reply or []]


class ResultsStore:
    """The results stream of one job. Every method raises the store's errors (errors.py)."""

    def __init__(self, client: redis.Redis, keys: JobKeys) -> None:
        self.client = client
        self.keys = keys
        self._ack = ResultsAckScript(client, keys)

    # ---- with a cursor, no group ----------------------------------------------------------
    def read_after(self, after: str, count: int) -> list[Entry]:
        """Up to ``count`` entries with ids above ``after`` ("0" for all), oldest first."""
        start = "-" if after in ("", "0", "0-0") else f"({after}"
        with translate_errors(self.client):
            return _entries(self.client.xrange(self.keys.results, start, "+", count=count))

    def wait_after(self, after: str, count: int, block_ms: int) -> list[Entry]:
        """As ``read_after``, waiting up to ``block_ms`` for an entry when there is none."""
        with translate_errors(self.client):
            reply: Any = self.client.xread({self.keys.results: after or "0"}, count=count,
                                      block=block_ms)
        return _entries(reply[0][1]) if reply else []

    def length(self) -> int:
        with translate_errors(self.client):
            return int(self.client.xlen(self.keys.results))

    # ---- consumer groups ------------------------------------------------------------------
    def register(self, group: str) -> bool:
        """Create the reader group ``group`` at the stream's start (the stream too if need
        be); False if it existed already (it keeps its place)."""
        with translate_errors(self.client):
            try:
                self.client.xgroup_create(self.keys.results, group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
                return False
        return True

    def unregister(self, group: str) -> bool:
        """Delete the reader group (what it had pending goes with it); False if absent."""
        with translate_errors(self.client):
            return bool(self.client.xgroup_destroy(self.keys.results, group))

    def read_group(self, group: str, consumer: str, count: int, block_ms: int | None,
                   pending_after: str | None = None) -> list[Entry]:
        """Entries never delivered to the group, now delivered to ``consumer`` (``block_ms``:
        wait that long for one; None: do not wait); with ``pending_after`` ("0": from the
        start), instead the entries after that id delivered to ``consumer`` before and not
        acknowledged (a restarted consumer of the same name gets them back this way)."""
        start = ">" if pending_after is None else pending_after
        with translate_errors(self.client):
            reply: Any = self.client.xreadgroup(
                group, consumer, {self.keys.results: start}, count=count,
                block=block_ms if pending_after is None else None)
        return _entries(reply[0][1]) if reply else []

    def claim_idle(self, group: str, consumer: str, idle_ms: int, cursor: str,
                   count: int) -> tuple[str, list[Entry]]:
        """Entries pending for longer than ``idle_ms`` (their consumer died or hangs), from
        ``cursor`` on, handed to ``consumer``; answers the cursor of the next call ("0-0": the
        pending list was gone through) and the entries (deleted ones are dropped by Redis)."""
        with translate_errors(self.client):
            reply: Any = self.client.xautoclaim(self.keys.results, group, consumer, idle_ms,
                                           start_id=cursor, count=count)
        return as_text(reply[0]), [e for e in _entries(reply[1]) if e[1] is not None]

    def ack(self, group: str, ids: Sequence[str]) -> tuple[int, int]:
        """Acknowledge ``ids`` for ``group`` and trim what every group acknowledged: answers
        (acked, trimmed)."""
        return self._ack.run(group, ids)

    def trim(self) -> int:
        """Trim what every group acknowledged (nothing without a group): entries removed."""
        return self._ack.run("", [])[1]

    def groups(self) -> list[GroupState]:
        """Every reader group of the stream, by name (none if the stream does not exist)."""
        with translate_errors(self.client):
            if self.client.type(self.keys.results) not in (b"stream", "stream"):
                return []
            infos = self.client.xinfo_groups(self.keys.results)
            states = [self._state(info) for info in infos]
        return sorted(states, key=lambda s: s.name)

    def group(self, name: str) -> GroupState:
        """The reader group ``name``; StoreError if it is not registered."""
        for state in self.groups():
            if state.name == name:
                return state
        raise StoreError(f"no reader group {name!r} on job {self.keys.job!r}")

    def _state(self, info: dict[Any, Any]) -> GroupState:
        lag = info.get("lag")
        last = as_text(info.get("last-delivered-id") or "0-0")
        if lag is None:  # Redis cannot tell (entries deleted in between): count them
            counted: Any = self.client.xrange(self.keys.results, f"({last}", "+",
                                              count=LAG_COUNTED_AT_MOST)
            lag = len(counted)
        return GroupState(name=as_text(info["name"]), consumers=int(info["consumers"]),
                          pending=int(info["pending"]), lag=int(lag), last_delivered=last)


def job_ended(report: JobStatus) -> bool:
    """True once the job writes no more results: it finished (its heartbeat recorded the
    finish and nothing was queued or leased since; a result is written with the ack of the
    request that made it, so every result is in the stream by then), or it was stopped and no
    live node is left."""
    if FinishedRun.from_meta(report.meta) and not (report.queued or report.leased):
        return True
    control = ControlState.parse(report.meta.get("control"), None).state
    return control in (STOPPING, STOPPED) and not any(node["alive"] for node in report.nodes)


def read_job(client: redis.Redis, keys: JobKeys) -> JobStatus:
    """The job's status (store/job_status.py), for a reader: whether it exists and ended."""
    return read_status(client, keys)
