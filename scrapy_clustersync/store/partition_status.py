"""The figures of each partition of a job split into partitions (``clustersync status``, ``top``,
``jobs``, the HTTP API and ``/metrics``): what each partition holds of the job's work, and
where it is on a Redis Cluster.

Each partition has its own queue (the frontier and the legacy queue), leases, dedup record,
dead letters and counters (docs/architecture.md, "Splitting a job into partitions"); the job's
figures are their sums. Partition 0's are read with the rest of the job's status
(job_status.py); the others here, in one pipeline, a few commands per partition whatever
their size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from .dedup import dedup_status
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text

#: dedup figures that are summed over the partitions (the others are partition 0's)
SUMMED_DEDUP = ("entries", "exact_entries", "bytes", "prepared_bytes", "layers")


@dataclass(frozen=True)
class PartitionFigures:
    """One partition: requests queued and leased, the bytes of its queued requests, URLs seen
    (its dedup record), dead letters, its counters (pushed, acked, ...), and ``primary``, the
    address of the Redis Cluster primary that holds it (None on one Redis)."""

    partition: int
    tag: str
    queued: int
    leased: int
    bytes: int
    seen: int
    dead_letters: int
    counters: dict[str, int] = field(default_factory=dict)
    dedup: dict[str, Any] = field(default_factory=dict)
    primary: str | None = None
    exists: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "tag": self.tag, "queued": self.queued,
                "leased": self.leased, "bytes": self.bytes, "seen": self.seen,
                "dead_letters": self.dead_letters, "done": self.counters.get("acked", 0),
                "primary": self.primary}


def figures_of(keys: JobKeys, meta: Mapping[str, str], legacy_queued: int, leased: int,
               seen: int, dead: int, counters: dict[str, int], bloom: Mapping[str, str],
               primary: str | None) -> PartitionFigures:
    """A partition's figures from what was read of it (``meta`` and ``bloom`` as text)."""
    dedup: dict[str, Any] = (dedup_status(dict(meta), dict(bloom), seen) if meta
                             else {"mode": "exact", "entries": seen})
    return PartitionFigures(
        partition=keys.partition, tag=keys.tag,
        queued=legacy_queued + int(meta.get("fqueued") or 0), leased=leased,
        bytes=int(meta.get("fbytes") or 0), seen=int(dedup["entries"]), dead_letters=dead,
        counters=counters, dedup=dedup, primary=primary, exists=bool(meta))


#: commands `queue_partition_reads` adds to a pipeline, per partition
PARTITION_READS = 7


def queue_partition_reads(pipe: Any, k: JobKeys) -> None:
    """Add to ``pipe`` the reads of one partition's figures (`PARTITION_READS` commands, read
    back by `partition_of_replies`)."""
    pipe.hgetall(k.meta)
    pipe.zcard(k.queue)
    pipe.zcard(k.deadlines)
    pipe.scard(k.seen)
    pipe.hgetall(k.stats)
    pipe.llen(k.dead)
    pipe.hgetall(k.bloom)


def partition_of_replies(client: redis.Redis, k: JobKeys,
                         replies: list[Any]) -> tuple[PartitionFigures, dict[str, str]]:
    """The figures of partition ``k`` from the replies to `queue_partition_reads`, and its
    meta as text."""
    meta, queued, leased, seen, stats, dead, bloom = replies
    meta_t = _texts(meta)
    figures = figures_of(k, meta_t, int(queued), int(leased), int(seen), int(dead),
                         {as_text(a): int(b) for a, b in stats.items()}, _texts(bloom),
                         primary_of_key(client, k.meta))
    return figures, meta_t


def read_other_partitions(client: redis.Redis, keys: JobKeys,
                          count: int) -> list[PartitionFigures]:
    """The figures of partitions 1 .. ``count`` - 1 of ``keys``'s job, in one pipeline (on a
    Redis Cluster, redis-py sends each primary its partitions' commands)."""
    others = keys.partitions(count)[1:]
    if not others:
        return []
    with translate_errors(client):
        pipe = client.pipeline(transaction=False)
        for k in others:
            queue_partition_reads(pipe, k)
        replies = pipe.execute()
    return [partition_of_replies(client, k, replies[i * PARTITION_READS:
                                                     (i + 1) * PARTITION_READS])[0]
            for i, k in enumerate(others)]


def primary_of_key(client: redis.Redis, key: str) -> str | None:
    """``host:port`` of the Redis Cluster primary that holds ``key``, from the slots the client
    learned (no round trip); None for a client of one Redis (or Sentinel)."""
    if not isinstance(client, RedisCluster):
        return None
    node = cast(RedisCluster, client).get_node_from_key(key)
    return f"{node.host}:{node.port}" if node is not None else None


def summed(partitions: list[PartitionFigures]) -> dict[str, Any]:
    """The job's figures as the sums of its partitions': queued, leased, seen, dead letters,
    the counters and the dedup record's (the dedup mode and settings are partition 0's)."""
    counters: dict[str, int] = {}
    for each in partitions:
        for name, value in each.counters.items():
            counters[name] = counters.get(name, 0) + value
    dedup = dict(partitions[0].dedup)
    for name in SUMMED_DEDUP:
        if name in dedup:
            dedup[name] = sum(int(each.dedup.get(name, 0)) for each in partitions)
    return {"queued": sum(each.queued for each in partitions),
            "leased": sum(each.leased for each in partitions),
            "seen": sum(each.seen for each in partitions),
            "dead_letters": sum(each.dead_letters for each in partitions),
            "counters": counters, "dedup": dedup}


def _texts(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {as_text(a): as_text(b) for a, b in raw.items()}
