"""``clustersync status``: everything shown of a job, read in one pipeline (no script)."""

from __future__ import annotations

from typing import Any

import redis

from .dedup import dedup_status
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text as _text
from .records import parse_node_record
from .script_results import DeadNode, JobStatus


def read_status(client: redis.Redis, keys: JobKeys) -> JobStatus:
    """The job as one pipeline (not a transaction) reads it."""
    k = keys
    with translate_errors(client):
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(k.meta)
        pipe.zcard(k.queue)
        pipe.zcard(k.deadlines)
        pipe.scard(k.seen)
        pipe.hgetall(k.stats)
        pipe.llen(k.dead)
        pipe.zrange(k.nodes, 0, -1, withscores=True)
        pipe.hgetall(k.node_info)
        pipe.hgetall(k.idle)
        pipe.hgetall(k.bloom)
        pipe.hgetall(k.dead_nodes)
        pipe.time()
        pipe.hgetall(k.scrapy_stats)
        pipe.hgetall(k.node_stats)
        (meta, queued, leased, seen, stats, dead, live, info, idle, bloom, deaths, now,
         summed, per_node) = pipe.execute()
    server_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    alive = {_text(n): score >= server_ms for n, score in live}
    # a node back from the dead is live again (listed dead until its next heartbeat)
    dead_nodes = sorted((DeadNode.parse(_text(n), v) for n, v in deaths.items()
                         if not alive.get(_text(n))), key=lambda d: (d.declared_ms, d.node))
    nodes = node_records(info, alive, idle, stats_by_node(per_node), dead_nodes)
    meta_t = {_text(a): _text(b) for a, b in meta.items()}
    dedup = dedup_status(meta_t, {_text(a): _text(b) for a, b in bloom.items()}, int(seen))
    return JobStatus(
        job=keys.job, exists=bool(meta_t), queued=int(queued), leased=int(leased),
        seen=int(dedup["entries"]), dead_letters=int(dead),
        counters={_text(a): int(b) for a, b in stats.items()},
        start_claimed_by=meta_t.get("start_claim"), start_done="start_done" in meta_t,
        server_ms=server_ms, nodes=nodes, dedup=dedup, meta=meta_t, dead_nodes=dead_nodes,
        scrapy_stats={_text(a): int(b) for a, b in summed.items()},
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


def stats_by_node(flat: dict[Any, Any]) -> dict[str, dict[str, int]]:
    """The ``node_stats`` hash ("<node>\\t<stat>" -> int) as node -> stat -> int."""
    nodes: dict[str, dict[str, int]] = {}
    for key, value in flat.items():
        node, _, name = _text(key).partition("\t")
        nodes.setdefault(node, {})[name] = int(value)
    return nodes
