"""``clustersync check``: the job's invariants, verified while it crawls, and mended on demand.

What must hold (docs/architecture.md, "Check and repair"):

- every lease is owned by a live node, or has expired (then the next lease call reclaims it);
- no entry is both queued and leased; every queued or leased id has its entry; every entry is
  queued or leased; the lease record and the lease deadline of an entry go together;
- the counts add up: entries = queued in the legacy queue + leased; the frontier's count is the
  sum of its sites' counts; and pushed - acked - dead <= held <= pushed - acked, held being the
  entries and the frontier's requests (every entry was pushed once and leaves by an ack or a
  dead letter);
- the live nodes run the same code and settings (their records' digests and ``versions``:
  node_differences.py says which settings or files differ, on which nodes).

Reads are cheap and not one snapshot (scans of the queue and entries, so that a big job never
blocks Redis), so each entry suspect is confirmed by ``lua/check.lua``, atomically, before it
is reported, and mended there with ``repair``. Counts and nodes are read in one transaction;
they are reported, never "mended": a wrong count is the trace of an entry finding.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..codec_envelope import UndecodableEntry, request_fields
from .check_script import CheckScript, Suspect
from .cluster_client import queue_server_time
from .errors import translate_errors
from .node_differences import node_differences
from .records import FormatError, LeaseValue, parse_node_record
from .records import as_text as _text
from .shared_settings import SharedSettingsStore

if TYPE_CHECKING:
    from .job_store import JobStore
    from .keys import JobKeys

#: suspects confirmed per script call: each call holds Redis for well under a millisecond
CONFIRM_BATCH = 200
SCAN_COUNT = 1000
#: entries are listed (HSCAN, values included on Redis 7.0) only when the counts do not add up,
#: or when the job is at most this big, or with ``deep``
ALWAYS_SCAN_ENTRIES_UP_TO = 100_000

#: what each kind of entry finding means, for people
KIND_TEXT = {
    "lease_of_dead_node": "leased to a node that is not alive, lease not expired",
    "queued_and_leased": "both queued and leased",
    "queued_without_entry": "queued, but its request is missing",
    "leased_without_entry": "leased, but its request is missing",
    "lease_without_deadline": "leased, without a lease deadline (it would never expire)",
    "deadline_without_lease": "has a lease deadline but no lease record",
    "entry_unqueued": "neither queued nor leased: it would never be crawled",
}


@dataclass(frozen=True)
class Finding:
    """One thing found wrong: its kind, what it is about (an entry or node id), the detail,
    and what the repair did ("" when not repaired)."""

    kind: str
    subject: str
    detail: str
    action: str = ""
    #: the partition of the job it is in (0 for a job of one partition)
    partition: int = 0

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"kind": self.kind, "subject": self.subject,
                                 "detail": self.detail, "action": self.action}
        if self.partition:
            found["partition"] = self.partition
        return found


@dataclass(frozen=True)
class Snapshot:
    """What one transaction read: the small structures whole, the big ones counted."""

    server_ms: int
    live_until: dict[str, float]
    records: dict[str, dict[str, Any]]
    leases: dict[str, str]
    deadlines: dict[str, float]
    counters: dict[str, int]
    queued: int  # in the legacy queue
    entries: int
    #: the frontier's requests queued: its own count (meta), and the sum of its sites' counts
    frontier_queued: int = 0
    frontier_sites_sum: int = 0


class JobCheck:
    """Checks one job, or one partition of it (``keys``: the partition's; ``run``);
    ``repair=True`` mends what it safely can.

    The nodes' liveness and records are partition 0's (job-wide state). A script runs on one
    partition's keys only, so in partitions 1 and up the leases of nodes not alive are
    reported from the reads, not confirmed nor mended (the heartbeats of live nodes return
    them), and an entry both queued and leased is confirmed but not mended there (which copy
    to keep depends on its node's liveness)."""

    def __init__(self, store: JobStore, keys: JobKeys | None = None) -> None:
        self.store = store
        self.client = store.client
        self.keys = keys or store.keys
        self.partition = self.keys.partition
        self._confirm = CheckScript(store.client, self.keys)
        #: queue scores of entries found in no structure, read from their requests
        self._scores: dict[str, str] = {}

    def run(self, repair: bool = False, deep: bool = False) -> list[Finding]:
        snap = self._snapshot()
        suspects = dict.fromkeys(self._lease_suspects(snap))
        unconfirmed = []
        if self.partition:
            unconfirmed = [Finding(kind, entry_id, _entry_detail(kind, entry_id, snap)
                                   + "; the heartbeats of live nodes return it",
                                   partition=self.partition)
                           for kind, entry_id in suspects if kind == "lease_of_dead_node"]
            suspects = {each: None for each in suspects if each[0] != "lease_of_dead_node"}
        queue_ids = self._scan_queue()
        suspects.update(dict.fromkeys(("queued_and_leased", i) for i in queue_ids
                                      if i in snap.leases or i in snap.deadlines))
        counts_add_up = snap.entries == snap.queued + len(snap.leases)
        if deep or not counts_add_up or snap.entries <= ALWAYS_SCAN_ENTRIES_UP_TO:
            suspects.update(dict.fromkeys(self._entry_suspects(snap, queue_ids)))
        findings = unconfirmed + self._confirmed(list(suspects), repair, snap)
        findings += [replace(each, partition=self.partition)
                     for each in self._count_findings(snap)]
        if not self.partition:  # the nodes are the job's, in partition 0
            shared = SharedSettingsStore(self.client, self.keys).names()
            findings += node_findings(snap, shared)
        return findings

    def leases_of_dead_nodes(self) -> dict[str, int]:
        """Leases held by nodes that are not alive and that have not expired, by node (from
        one snapshot; nothing scanned)."""
        snap = self._snapshot()
        held: dict[str, int] = {}
        for kind, entry_id in self._lease_suspects(snap):
            if kind == "lease_of_dead_node":
                node = LeaseValue.parse(snap.leases[entry_id]).node
                held[node] = held.get(node, 0) + 1
        return held

    # ---- reads ---------------------------------------------------------------------------
    def _snapshot(self) -> Snapshot:
        k = self.keys
        with translate_errors(self.client):
            pipe = self.client.pipeline(transaction=True)
            queue_server_time(pipe, k.meta)
            pipe.zrange(k.nodes, 0, -1, withscores=True)
            pipe.hgetall(k.node_info)
            pipe.hgetall(k.leased)
            pipe.zrange(k.deadlines, 0, -1, withscores=True)
            pipe.hgetall(k.stats)
            pipe.zcard(k.queue)
            pipe.hlen(k.entries)
            pipe.hget(k.meta, "fqueued")
            # the sites with requests queued: a broad crawl's are many, but one sorted set
            pipe.zrange(k.frontier_sites, 0, -1, withscores=True)
            (now, nodes, info, leased, deadlines, stats, queued, entries, frontier_queued,
             frontier_sites) = pipe.execute()
            if self.partition:  # the job's nodes are in partition 0
                pipe = self.client.pipeline(transaction=False)
                pipe.zrange(self.store.keys.nodes, 0, -1, withscores=True)
                pipe.hgetall(self.store.keys.node_info)
                nodes, info = pipe.execute()
        return Snapshot(
            server_ms=int(now[0]) * 1000 + int(now[1]) // 1000,
            live_until={_text(n): float(s) for n, s in nodes},
            records={_text(n): parse_node_record(v) for n, v in info.items()},
            leases={_text(i): _text(v) for i, v in leased.items()},
            deadlines={_text(i): float(s) for i, s in deadlines},
            counters={_text(a): int(b) for a, b in stats.items()},
            queued=int(queued), entries=int(entries), frontier_queued=int(frontier_queued or 0),
            frontier_sites_sum=int(sum(score for _, score in frontier_sites)))

    def _scan_queue(self) -> set[str]:
        with translate_errors(self.client):
            return {_text(i) for i, _ in self.client.zscan_iter(self.keys.queue,
                                                                count=SCAN_COUNT)}

    def _entry_ids_and_scores(self) -> Iterator[tuple[str, str]]:
        """Every entry's id and the queue score its request's priority gives."""
        with translate_errors(self.client):
            for raw_id, blob in self.client.hscan_iter(self.keys.entries, count=SCAN_COUNT):
                yield _text(raw_id), queue_score_of(blob)

    # ---- suspects --------------------------------------------------------------------------
    @staticmethod
    def _lease_suspects(snap: Snapshot) -> Iterator[tuple[str, str]]:
        for entry_id, value in snap.leases.items():
            if entry_id not in snap.deadlines:
                yield "lease_without_deadline", entry_id
                continue
            try:
                owner = LeaseValue.parse(value).node
            except FormatError:
                continue
            alive = snap.live_until.get(owner, 0) >= snap.server_ms
            if not alive and snap.deadlines[entry_id] >= snap.server_ms:
                yield "lease_of_dead_node", entry_id
        for entry_id in snap.deadlines:
            if entry_id not in snap.leases:
                yield "deadline_without_lease", entry_id

    def _entry_suspects(self, snap: Snapshot, queue_ids: set[str]) -> Iterator[tuple[str, str]]:
        entry_ids: set[str] = set()
        for entry_id, score in self._entry_ids_and_scores():
            entry_ids.add(entry_id)
            if entry_id not in queue_ids and entry_id not in snap.leases \
                    and entry_id not in snap.deadlines:
                self._scores[entry_id] = score
                yield "entry_unqueued", entry_id
        for entry_id in queue_ids - entry_ids:
            yield "queued_without_entry", entry_id
        for entry_id in (snap.leases.keys() | snap.deadlines.keys()) - entry_ids:
            yield "leased_without_entry", entry_id

    def _confirmed(self, suspects: list[tuple[str, str]], repair: bool,
                   snap: Snapshot) -> list[Finding]:
        """The suspects that hold when the script looks, each mended with ``repair``."""
        scores = self._scores
        findings: list[Finding] = []
        for start in range(0, len(suspects), CONFIRM_BATCH):
            batch: list[Suspect] = [(kind, entry_id, scores.get(entry_id, ""))
                                    for kind, entry_id in suspects[start:start + CONFIRM_BATCH]]
            for kind, entry_id, action in self._confirm_batch(batch, repair):
                findings.append(Finding(kind, entry_id, _entry_detail(kind, entry_id, snap),
                                        action, self.partition))
        return findings

    def _confirm_batch(self, batch: list[Suspect], repair: bool) -> list[tuple[str, str, str]]:
        """check.lua's answer for ``batch``; in partitions 1 and up an entry both queued and
        leased is only confirmed (its mend reads the liveness of nodes, in partition 0)."""
        if not (repair and self.partition):
            return self._confirm.run(batch, repair)
        held = [each for each in batch if each[0] == "queued_and_leased"]
        rest = [each for each in batch if each[0] != "queued_and_leased"]
        return ((self._confirm.run(held, False) if held else [])
                + (self._confirm.run(rest, True) if rest else []))

    @staticmethod
    def _count_findings(snap: Snapshot) -> list[Finding]:
        found = []
        held = snap.queued + len(snap.leases)
        if snap.entries != held:
            found.append(Finding("counts", "entries", f"{snap.entries:,} entries, but "
                                 f"{snap.queued:,} queued + {len(snap.leases):,} leased = "
                                 f"{held:,}"))
        if snap.frontier_queued != snap.frontier_sites_sum:
            found.append(Finding("counts", "frontier", f"{snap.frontier_queued:,} requests "
                                 f"queued in the frontier, but its sites count "
                                 f"{snap.frontier_sites_sum:,}"))
        c = snap.counters
        pushed, acked, dead = c.get("pushed", 0), c.get("acked", 0), c.get("dead", 0)
        held = snap.entries + snap.frontier_queued
        if not pushed - acked - dead <= held <= pushed - acked:
            found.append(Finding("counts", "counters", f"pushed {pushed:,} - acked {acked:,} "
                                 f"(- dead {dead:,}) does not bound the {held:,} requests "
                                 "held"))
        return found


def node_findings(snap: Snapshot, shared: Collection[str] = ()) -> list[Finding]:
    """Live nodes that run other code or settings than the others (report only); the job's
    ``shared`` settings are no difference."""
    live = {node: record for node, record in snap.records.items()
            if snap.live_until.get(node, 0) >= snap.server_ms}
    return differing_nodes(live, shared)


def differing_nodes(live: dict[str, dict[str, Any]],
                    shared: Collection[str] = ()) -> list[Finding]:
    """A finding per setting, file or versions not the same on every live node, naming which
    nodes have what (node_differences.py); the job's ``shared`` settings are no difference."""
    return [Finding("nodes_differ", d.subject, d.detail if d.groups else d.note)
            for d in node_differences(live, shared)]


def queue_score_of(blob: bytes) -> str:
    """The queue score (-priority) of an encoded request; '' if it cannot be read."""
    try:
        return str(-int(request_fields(blob).get("priority", 0)))
    except (UndecodableEntry, TypeError, ValueError):
        return ""


def _entry_detail(kind: str, entry_id: str, snap: Snapshot) -> str:
    text = KIND_TEXT.get(kind, kind)
    if entry_id in snap.leases:
        text += f" (lease {snap.leases[entry_id]})"
    return text


def check_job(store: JobStore, repair: bool = False, deep: bool = False) -> list[Finding]:
    """``JobCheck.run`` over every partition of the job, partition 0 first."""
    from .job_store import job_partitions

    count = job_partitions(store.client, store.keys.job)
    return [finding for keys in store.keys.partitions(count)
            for finding in JobCheck(store, keys).run(repair, deep)]


def leases_of_dead_nodes(store: JobStore) -> dict[str, int]:
    """``JobCheck.leases_of_dead_nodes`` summed over every partition of the job."""
    from .job_store import job_partitions

    held: dict[str, int] = {}
    for keys in store.keys.partitions(job_partitions(store.client, store.keys.job)):
        for node, count in JobCheck(store, keys).leases_of_dead_nodes().items():
            held[node] = held.get(node, 0) + count
    return held
