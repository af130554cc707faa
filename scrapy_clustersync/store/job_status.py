"""``clustersync status``: everything shown of a job, read in one pipeline (no script); a job
split into partitions takes one more, for its other partitions (partition_status.py)."""

from __future__ import annotations

from typing import Any

import redis

from .cluster_client import queue_server_time
from .errors import StoreError, translate_errors
from .keys import PARTITIONS_FIELD, JobKeys, parse_partitions
from .partition_status import (
    PARTITION_READS,
    partition_of_replies,
    queue_partition_reads,
    read_other_partitions,
    summed,
)
from .records import as_text as _text
from .records import parse_node_record
from .script_results import DeadNode, JobStatus


def read_status(client: redis.Redis, keys: JobKeys) -> JobStatus:
    """The job as one pipeline (not a transaction) reads it."""
    k = keys
    with translate_errors(client):
        pipe = client.pipeline(transaction=False)
        queue_partition_reads(pipe, k)  # partition 0's figures, as every partition's
        pipe.zrange(k.nodes, 0, -1, withscores=True)
        pipe.hgetall(k.node_info)
        pipe.hgetall(k.idle)
        pipe.hgetall(k.dead_nodes)
        queue_server_time(pipe, k.meta)
        pipe.hgetall(k.scrapy_stats)
        pipe.hgetall(k.node_stats)
        pipe.zrange(k.node_seen, 0, -1, withscores=True)
        pipe.hgetall(k.pruned)
        pipe.xlen(k.results)
        pipe.hgetall(k.results_meta)
        replies = pipe.execute()
    first, meta_t = partition_of_replies(client, k, replies[:PARTITION_READS])
    (live, info, idle, deaths, now, summed_stats, per_node, beats, pruned, results_length,
     results_meta) = replies[PARTITION_READS:]
    server_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    alive = {_text(n): score >= server_ms for n, score in live}
    # a node back from the dead is live again (listed dead until its next heartbeat)
    dead_nodes = sorted((DeadNode.parse(_text(n), v) for n, v in deaths.items()
                         if not alive.get(_text(n))), key=lambda d: (d.declared_ms, d.node))
    last_beats = {_text(n): int(score) for n, score in beats}
    nodes = node_records(info, alive, idle, stats_by_node(per_node), dead_nodes)
    for record in nodes:
        mark_silence(record, last_beats.get(record["id"]), server_ms)
    partitions = [first, *read_other_partitions(client, keys,
                                                partition_count(meta_t, keys.job))]
    job = summed(partitions)
    return JobStatus(
        job=keys.job, exists=bool(meta_t), leased=job["leased"],
        queued=job["queued"],  # legacy queue + frontier, of every partition
        seen=job["seen"], dead_letters=job["dead_letters"], counters=job["counters"],
        start_claimed_by=meta_t.get("start_claim"), start_done="start_done" in meta_t,
        server_ms=server_ms, nodes=nodes, dedup=job["dedup"], meta=meta_t,
        dead_nodes=dead_nodes,
        scrapy_stats={_text(a): int(b) for a, b in summed_stats.items()},
        pruned={_text(a): int(b) for a, b in pruned.items()},
        results={"length": int(results_length),
                 **{_text(a): int(b) for a, b in results_meta.items()}},
        partitions=partitions,
    )

def node_records(info: dict[Any, Any], alive: dict[str, bool], idle: dict[Any, Any],
                 node_stats: dict[str, dict[str, int]],
                 dead_nodes: list[DeadNode]) -> list[dict[str, Any]]:
    """Each node's record as status lists it, sorted by node id: what its heartbeat stored,
    with its id, liveness, idleness and stats; "dead" as its state if it was declared dead."""
    idle_since = {_text(n) for n in idle}
    declared = {d.node for d in dead_nodes}
    nodes = []
    for raw_id, raw_info in sorted(info.items()):
        node = _text(raw_id)
        record = parse_node_record(raw_info)
        record.update(id=node, alive=alive.get(node, False), idle=node in idle_since,
                      stats=node_stats.get(node, {}))
        if node in declared:
            record["state"] = "dead"
        nodes.append(record)
    return nodes


def mark_silence(record: dict[str, Any], last_beat_ms: int | None, server_ms: int) -> None:
    """Add to a node's record its last heartbeat (``last_beat_ms``, server ms, None if not
    kept) and ``silent_s``, how long ago that was on the Redis clock; a node that is not alive,
    did not leave ("closed") and was not declared dead ("dead") gets the state "silent": it went
    without a word (killed, cut off) and no live node has declared it dead yet."""
    record["last_beat_ms"] = last_beat_ms
    if last_beat_ms is None:  # a record from before last beats were kept: the node's clock
        updated = float(record.get("updated") or 0)
        record["silent_s"] = round(max(0.0, server_ms / 1000 - updated), 1) if updated else None
    else:
        record["silent_s"] = round(max(0, server_ms - last_beat_ms) / 1000, 1)
    if not record["alive"] and record.get("state") not in ("closed", "dead"):
        record["state"] = "silent"


def stats_by_node(flat: dict[Any, Any]) -> dict[str, dict[str, int]]:
    """The ``node_stats`` hash ("<node>\\t<stat>" -> int) as node -> stat -> int."""
    nodes: dict[str, dict[str, int]] = {}
    for key, value in flat.items():
        node, _, name = _text(key).partition("\t")
        nodes.setdefault(node, {})[name] = int(value)
    return nodes


def partition_count(meta: dict[str, str], job: str) -> int:
    """The partition count partition 0's meta (as text) records (keys.parse_partitions)."""
    try:
        return parse_partitions(meta.get(PARTITIONS_FIELD))
    except ValueError as exc:
        raise StoreError(f"job {job!r}: {exc}") from None
