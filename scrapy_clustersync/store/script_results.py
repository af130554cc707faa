"""What the job's scripts and reads answer: leases, flush results, heartbeats, joins, status."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from .partition_status import PartitionFigures
from .records import NODE_RECORD_UNREADABLE, parse_node_record


class Leased(NamedTuple):
    """One entry leased to the node: its id, its encoded request and its priority."""

    entry_id: str
    blob: bytes
    priority: float


class LeaseBatch(list[Leased]):
    """The entries one lease handed out, in order; ``retry_s``: with fewer than asked for
    because a site was passed over for its pace, in how many seconds a lease may get one of it
    (None: none was passed over)."""

    retry_s: float | None = None


@dataclass(frozen=True)
class FlushResult:
    """What a flush did: requests pushed and filtered, leases acked and released, dead letters,
    and the dedup record's state after it."""

    pushed: int = 0
    filtered: int = 0
    acked: int = 0
    released: int = 0
    dead: int = 0
    bloom_layers: int = 0
    #: entries in the last Bloom layer in use (0 with exact dedup)
    bloom_active_entries: int = 0
    #: fingerprints in the job's exact set (a Bloom job's, until they moved into the filter)
    exact_entries: int = 0


@dataclass(frozen=True)
class Heartbeat:
    """The job as a node's heartbeat found it: finished or not, work out, nodes alive."""

    finished: bool
    queued: int
    leased: int
    live_nodes: int
    server_ms: int
    #: "done", "mine" (this node holds the start() claim), "other" or "none"
    start: str = "none"
    #: ms from now until the job is finished if nothing changes: 0 it is, -1 it cannot be by
    #: waiting (work is queued or leased, start() runs, a live node is busy)
    finish_wait_ms: int = -1
    #: requests the job's nodes acked (done) in the job's whole life
    done: int = 0
    #: the nodes this heartbeat declared dead
    declared_dead: tuple[Declared, ...] = ()
    #: this node's own death record if another node had declared it dead (it came back after
    #: a long pause or a network cut; see DeadNode), else None
    my_death: DeadNode | None = None


class Declared(NamedTuple):
    """A node a heartbeat declared dead: its id, the leases it returned to the queue, and how
    long it had been silent (server ms since its last heartbeat)."""

    node: str
    leases: int
    silent_ms: int


def parse_declared(text: str) -> tuple[Declared, ...]:
    """The nodes a heartbeat declared dead, from its "<leases>\\t<silent ms>\\t<node>" lines."""
    found = []
    for line in text.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            count, silent, node = parts
            found.append(Declared(node, int(count), int(float(silent))))
    return tuple(found)


@dataclass(frozen=True)
class DeadNode:
    """A node declared dead: its heartbeats stopped for CLUSTERSYNC_NODE_DEAD_AFTER.

    Written by the heartbeat (heartbeat.lua ``declare_dead``) that declared it, in the same
    atomic step that returned its leases to the queue; kept in the job's ``dead_nodes`` hash
    until the node comes back.
    """

    node: str
    #: server ms when it was declared dead, and by which node
    declared_ms: int
    by: str
    #: server ms its liveness ran out (its last heartbeat + its NODE_DEAD_AFTER)
    deadline_ms: int
    #: how many of its leases went back to the queue
    leases_returned: int
    #: its last node record (node/node_record.py): what it held then (leased, prefetched...)
    record: dict[str, Any] = field(default_factory=dict)
    #: server ms of its last heartbeat (0 in a record written before it was kept)
    last_beat_ms: int = 0

    @property
    def silent_ms(self) -> int:
        """How long it had been silent when it was declared dead (0 if unknown)."""
        return self.declared_ms - self.last_beat_ms if self.last_beat_ms else 0

    @classmethod
    def parse(cls, node: str, value: str | bytes) -> DeadNode:
        """The record as heartbeat.lua wrote it; a value that is no such record (another
        program wrote it) gives one with zeros and the text as ``record["unreadable"]``."""
        data = parse_node_record(value)  # the same JSON object, read the same way
        if NODE_RECORD_UNREADABLE in data:
            return cls(node, 0, "", 0, 0, data)
        record = data.get("record")
        return cls(node, int(data.get("declared_ms") or 0), str(data.get("by") or ""),
                   int(data.get("deadline_ms") or 0), int(data.get("leases_returned") or 0),
                   record if isinstance(record, dict) else {},
                   int(data.get("last_beat_ms") or 0))

    def to_dict(self) -> dict[str, Any]:
        """As ``status --json`` lists it; ``held``: what its last record said it held."""
        held = {name: self.record.get(name, 0)
                for name in ("leased", "prefetched", "inflight", "buffered")}
        declared_at = datetime.fromtimestamp(self.declared_ms / 1000, timezone.utc)
        return {"node": self.node, "declared_ms": self.declared_ms,
                "declared_at": declared_at.isoformat(timespec="seconds"), "by": self.by,
                "deadline_ms": self.deadline_ms, "last_beat_ms": self.last_beat_ms,
                "silent_s": round(self.silent_ms / 1000, 1),
                "leases_returned": self.leases_returned,
                "held": held, "record": self.record}


@dataclass(frozen=True)
class FinishedRun:
    """How the job's last run ended, as the heartbeat that first found it finished recorded it."""

    at_ms: int
    #: requests done (acked) in the job's whole life, at that time
    pages: int
    #: live nodes then, every one idle for ``idle_ms``
    nodes: int
    idle_ms: int

    #: where the record is kept in the job's meta hash (prelude.lua FINISH_FIELDS, same order)
    META_FIELDS = ("finished_ms", "finished_pages", "finished_nodes", "finished_idle_ms")

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> FinishedRun | None:
        """The record in the job's meta hash (as text), or None while the job has none."""
        if not meta.get(cls.META_FIELDS[0]):
            return None
        return cls(*(int(meta.get(name) or 0) for name in cls.META_FIELDS))

    def why(self) -> str:
        """Why the job finished, in the words the log uses."""
        return (f"queue empty, no lease out, {self.nodes} node(s) idle for "
                f"{self.idle_ms / 1000:g}s")


@dataclass(frozen=True)
class Joined:
    """What joining the job answered (``JobStore.join_node``)."""

    epoch: str
    #: this node must run the spider's start()
    runs_start: bool
    #: the job's last run finished and nothing is queued: the node did not join (None otherwise)
    finished: FinishedRun | None = None
    #: "keep-seen" or "forget-seen" if this node restarted the finished job; "held" if
    #: "forget-seen" did not, as live nodes still hold the finished job open; else ""
    restarted: str = ""


@dataclass(frozen=True)
class Restarted:
    """What ``JobStore.restart`` did: whether it restarted the job, and what it found;
    ``resumed``: the control state it took the job out of (stopped, stopping, paused), else
    ""."""

    done: bool
    live_nodes: int
    queued: int
    leased: int
    resumed: str = ""


@dataclass
class JobStatus:
    """Everything ``clustersync status`` shows of a job, read in one pipeline."""

    job: str
    exists: bool
    queued: int
    leased: int
    seen: int
    dead_letters: int
    counters: dict[str, int]
    start_claimed_by: str | None
    start_done: bool
    server_ms: int
    nodes: list[dict[str, Any]] = field(default_factory=list)
    dedup: dict[str, Any] = field(default_factory=dict)
    #: the job's meta hash as text (epoch, dedup settings, start claim, finish record...)
    meta: dict[str, str] = field(default_factory=dict)
    #: the Scrapy stats of every node, summed (plugin/stats_sender.py); each node's in its record
    scrapy_stats: dict[str, int] = field(default_factory=dict)
    #: the nodes declared dead and not come back, oldest death first
    dead_nodes: list[DeadNode] = field(default_factory=list)
    #: what is kept of the nodes pruned after CLUSTERSYNC_NODE_RETENTION (keys.py ``pruned``)
    pruned: dict[str, int] = field(default_factory=dict)
    #: the results stream: ``length`` (entries), and the ``results_meta`` hash (``cap``,
    #: ``written``, ``refused_full``, ``full_since_ms`` while full)
    results: dict[str, int] = field(default_factory=dict)
    #: each partition's figures, partition 0 first (one for a job of one partition); the
    #: job's queued, leased, seen, dead letters, counters and dedup figures are their sums
    partitions: list[PartitionFigures] = field(default_factory=list)

    @property
    def split(self) -> bool:
        """The job is split into more than one partition."""
        return len(self.partitions) > 1

    @property
    def state(self) -> str:
        if not self.exists:
            return "absent"
        if any(node["alive"] and not node["idle"] for node in self.nodes):
            return "running"
        if self.queued or self.leased:
            return "waiting for nodes" if not any(n["alive"] for n in self.nodes) else "running"
        if any(node["alive"] for node in self.nodes):
            return "idle"
        if not self.start_done and not self.meta.get(FinishedRun.META_FIELDS[0]):
            # a new run (created, restarted) whose start() runs on the next node to join
            return "waiting for nodes"
        return "finished" if self.counters.get("acked") else "seeded"

    @property
    def unserializable(self) -> int:
        """Requests the nodes kept because they cannot travel (crawled there, not crash-safe)."""
        return sum(int(node.get("unserializable", 0)) for node in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job, "state": self.state, "queued": self.queued, "leased": self.leased,
            "seen": self.seen, "done": self.counters.get("acked", 0),
            "unserializable": self.unserializable,
            "dead_letters": self.dead_letters, "counters": self.counters,
            "start_claimed_by": self.start_claimed_by, "start_done": self.start_done,
            "nodes": self.nodes, "dedup": self.dedup, "stats": self.scrapy_stats,
            "dead_nodes": [dead.to_dict() for dead in self.dead_nodes],
            "results": self.results,
        }
