"""``lease.lua``: a batch of queued requests leased to one node, expired leases returned first."""

from __future__ import annotations

from typing import Any

import redis

from .keys import JobKeys
from .records import as_bytes, as_text
from .script_base import JobScript
from .script_results import Leased

#: expired leases one lease call returns to the queue at most
RECLAIM_PER_LEASE = 200


class LeaseScript(JobScript):
    """lease.lua for one node: ``run`` leases up to ``count`` entries in the queue's order."""

    FILE = "lease"
    HELPERS = ("tasks",)
    KEYS = ("meta", "queue", "entries", "deadlines", "leased", "stats", "last_call", "tasks",
            "task_of")
    ARGV = ("epoch", "call_id", "node", "count", "lease_ms", "reclaim_max", "writes_seen")

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        super().__init__(client, keys)
        self.node_id = node_id

    def call(self, epoch: str, call_id: str, count: int, lease_ms: int,
             writes_seen: int) -> tuple[list[str], list[Any]]:
        k = self.keys
        keys = [k.meta, k.queue, k.entries, k.deadlines, k.leased, k.stats,
                k.last_call(self.node_id), k.tasks, k.task_of]
        return keys, [epoch, call_id, self.node_id, count, lease_ms, RECLAIM_PER_LEASE,
                      writes_seen]

    def run(self, epoch: str, call_id: str, count: int, lease_ms: int,
            writes_seen: int) -> tuple[list[Leased], int]:
        """The entries leased (the same ones again for a call id seen before, those still
        leased to this node), and the node's write counter after the call."""
        return self.parse(self._call(*self.call(epoch, call_id, count, lease_ms, writes_seen)))

    def parse(self, reply: Any) -> tuple[list[Leased], int]:
        """``run``'s answer from the script's reply."""
        writes, *flat = reply
        leased = [Leased(as_text(flat[i]), as_bytes(flat[i + 1]), -float(flat[i + 2]))
                  for i in range(0, len(flat), 3)]
        return leased, int(writes)
