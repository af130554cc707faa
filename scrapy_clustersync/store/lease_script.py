"""``lease.lua``: a batch of queued requests leased to one node, expired leases returned first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from .keys import JobKeys
from .records import as_bytes, as_text
from .script_base import JobScript
from .script_results import LeaseBatch, Leased
from .site_scripts import SITE_IDLE_MS

#: leases one lease call returns to the queue at most: leases of dead nodes (index entries
#: read, lua/lease_index.lua), then expired leases; a few milliseconds of Redis at most
RECLAIMED_LEASES_PER_LEASE_CALL = 50
#: how far ahead a lease is meant to last when the caller does not say
DEFAULT_HORIZON_MS = 1000


@dataclass(frozen=True)
class LeasePace:
    """How fast a lease hands out each site's requests (lua/frontier.lua site_allowance).

    ``on``: no faster than the site's delay (or its backoff after 503s, or its Retry-After)
    allows within the lease's horizon, and no more than ``per_domain`` at once (0: no cap), as
    the cluster's politeness decides them (plugin/cluster_turns.py); off, every ready site is
    served as fast as the lease is asked. A site's delay is its ``site_delays`` entry, else
    ``delay_s``; with ``recorded_first`` (AutoThrottle, DOWNLOAD_SLOTS: Scrapy's slot decides
    it) the one the site's politeness hash records from the nodes' turns comes first. ``idle_s``:
    how long the site's hash lives after its last use (the site turns' own expiry).
    """

    on: bool = False
    delay_s: float = 0.0
    site_delays: Mapping[str, float] = field(default_factory=dict)
    per_domain: int = 0
    recorded_first: bool = False
    idle_s: float = SITE_IDLE_MS / 1000


class LeaseScript(JobScript):
    """lease.lua for one node: ``run`` leases up to ``count`` entries in the queue's order."""

    FILE = "lease"
    HELPERS = ("tasks", "frontier", "lease_index")
    KEYS = ("meta", "queue", "entries", "deadlines", "leased", "stats", "last_call", "tasks",
            "task_of", "frontier", "site_prefix", "nodes", "node_leases", "node_numbers",
            "reclaiming")
    ARGV = ("epoch", "call_id", "node", "count", "lease_ms", "reclaim_max", "writes_seen", "pace",
            "horizon_ms", "delay_ms", "per_domain", "idle_ms", "region", "foreign")
    ARGV_TAIL = "delays"

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        super().__init__(client, keys)
        self.node_id = node_id
        #: how fast sites are served; the node's politeness sets it (``JobStore.lease_pace``)
        self.pace = LeasePace()
        self._pace_args: list[Any] = self._pace_argv(self.pace)
        #: the node's region (CLUSTERSYNC_REGION; "" for none): its sites are leased first
        self.region = ""

    @staticmethod
    def _pace_argv(pace: LeasePace) -> list[Any]:
        mode = (2 if pace.recorded_first else 1) if pace.on else 0
        return [mode, round(pace.delay_s * 1000, 3), pace.per_domain, int(pace.idle_s * 1000)]

    def set_pace(self, pace: LeasePace) -> None:
        self.pace, self._pace_args = pace, self._pace_argv(pace)

    def call(self, epoch: str, call_id: str, count: int, lease_ms: int, writes_seen: int,
             horizon_ms: int = DEFAULT_HORIZON_MS, foreign: bool = True
             ) -> tuple[list[str], list[Any]]:
        k = self.keys
        keys = [k.meta, k.queue, k.entries, k.deadlines, k.leased, k.stats,
                k.last_call(self.node_id), k.tasks, k.task_of, k.frontier, k.site_prefix,
                k.nodes, k.node_leases, k.node_numbers, k.reclaiming]
        mode, delay_ms, per_domain, idle_ms = self._pace_args
        args: list[Any] = [epoch, call_id, self.node_id, count, lease_ms,
                           RECLAIMED_LEASES_PER_LEASE_CALL, writes_seen, mode, horizon_ms,
                           delay_ms, per_domain, idle_ms, self.region, int(foreign)]
        if mode:
            for site, delay_s in self.pace.site_delays.items():
                args.extend((site, round(delay_s * 1000, 3)))
        return keys, args

    def run(self, epoch: str, call_id: str, count: int, lease_ms: int, writes_seen: int,
            horizon_ms: int = DEFAULT_HORIZON_MS, foreign: bool = True) -> tuple[LeaseBatch, int]:
        """The entries leased (the same ones again for a call id seen before, those still
        leased to this node), and the node's write counter after the call. ``horizon_ms``: how
        long until the node's next lease, about: what a paced site may start in it.
        ``foreign``: the node has nothing to do, so it takes the sites of other regions when
        its own region's and those of no region give nothing."""
        return self.parse(self._call(*self.call(epoch, call_id, count, lease_ms, writes_seen,
                                                horizon_ms, foreign)))

    def parse(self, reply: Any) -> tuple[LeaseBatch, int]:
        """``run``'s answer from the script's reply."""
        writes, retry_ms, *flat = reply
        leased = LeaseBatch(Leased(as_text(flat[i]), as_bytes(flat[i + 1]), -float(flat[i + 2]))
                            for i in range(0, len(flat), 3))
        if int(retry_ms) >= 0:
            leased.retry_s = int(retry_ms) / 1000
        return leased, int(writes)
