"""Which Redis primary a job is on, for a node that reaches Redis through Sentinel: the node
records the address its connections reached in the job's meta whenever it changes (primary.lua),
so ``clustersync status`` can say where the job is and that a failover happened."""

from __future__ import annotations

import redis
from redis.sentinel import SentinelConnectionPool

from .records import as_text
from .script_base import JobScript


def primary_address(client: redis.Redis) -> str | None:
    """``host:port`` of the primary ``client``'s connections last reached through Sentinel (no
    round trip: the address the pool last got from the sentinels); None for a client of one
    Redis, or before its first connection."""
    pool = getattr(client, "connection_pool", None)  # a cluster client has none
    if not isinstance(pool, SentinelConnectionPool):
        return None
    address = pool.master_address
    return f"{as_text(address[0])}:{address[1]}" if address else None


class PrimaryScript(JobScript):
    """primary.lua: ``run`` answers the address before when it recorded a change ("" when none
    was recorded, None when the job is not there)."""

    FILE = "primary"
    KEYS = ("meta",)
    ARGV = ("address",)

    def call(self, address: str) -> tuple[list[str], list[str]]:
        return [self.keys.meta], [address]

    def run(self, address: str) -> str | None:
        reply = self._call(*self.call(address))
        return None if reply is None else as_text(reply)
