"""``heartbeat.lua``: a node kept alive, its leases renewed, dead nodes declared, the job's end
found."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .keys import JobKeys
from .records import as_text
from .script_base import JobScript
from .script_results import DeadNode, Heartbeat, parse_declared


@dataclass(frozen=True)
class Beat:
    """What a node says in one heartbeat (heartbeat.lua's header has each field's meaning).

    ``idle``: 0 busy, 1 idle, 2 idle now but busy since its last heartbeat; ``info``: its node
    record, as JSON (records.format_node_record).
    """

    ttl_ms: int
    lease_ms: int
    info: str
    idle: int
    idle_after_ms: int
    grace_ms: int
    told_ms: int
    gap_ms: int
    lease_ids: Sequence[str]
    #: nodes that left or died longer ago than this are pruned (0: never)
    retention_ms: int = 0


class HeartbeatScript(JobScript):
    """heartbeat.lua for one node."""

    FILE = "heartbeat"
    HELPERS = ("frontier", "lease_index")
    KEYS = ("meta", "nodes", "node_info", "idle", "deadlines", "leased", "queue", "last_call",
            "stats", "dead_nodes", "node_seen", "node_stats", "scrapy_stats", "pruned",
            "entries", "frontier", "node_leases", "node_numbers", "reclaiming")
    ARGV = ("epoch", "node", "ttl_ms", "lease_ms", "info", "idle", "idle_after_ms",
            "writes_seen", "grace_ms", "told_ms", "gap_ms", "retention_ms")
    ARGV_TAIL = "lease_id"

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        super().__init__(client, keys)
        self.node_id = node_id

    def call(self, epoch: str, beat: Beat, writes_seen: int) -> tuple[list[str], list[Any]]:
        k = self.keys
        keys = [k.meta, k.nodes, k.node_info, k.idle, k.deadlines, k.leased, k.queue,
                k.last_call(self.node_id), k.stats, k.dead_nodes, k.node_seen, k.node_stats,
                k.scrapy_stats, k.pruned, k.entries, k.frontier, k.node_leases, k.node_numbers,
                k.reclaiming]
        args: list[Any] = [epoch, self.node_id, beat.ttl_ms, beat.lease_ms, beat.info, beat.idle,
                           beat.idle_after_ms, writes_seen, beat.grace_ms, beat.told_ms,
                           beat.gap_ms, beat.retention_ms, *beat.lease_ids]
        return keys, args

    def run(self, epoch: str, beat: Beat, writes_seen: int) -> tuple[Heartbeat, int]:
        """The job as the heartbeat found it, and the node's write counter after it."""
        return self.parse(self._call(*self.call(epoch, beat, writes_seen)))

    def parse(self, reply: Any) -> tuple[Heartbeat, int]:
        """``run``'s answer from the script's reply."""
        (finished, queued, leased, live, now_ms, writes, start, wait_ms, done, declared,
         my_death) = reply
        heartbeat = Heartbeat(
            bool(finished), int(queued), int(leased), int(live), int(now_ms), as_text(start),
            int(wait_ms), int(done), parse_declared(as_text(declared)),
            DeadNode.parse(self.node_id, my_death) if as_text(my_death) else None)
        return heartbeat, int(writes)
