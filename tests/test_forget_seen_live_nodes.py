"""CLUSTERSYNC_RECRAWL = "forget-seen" restarts a finished job only once no node is live on it:
a node kept open by a DontCloseSpider remembers the fingerprints it sent, and would drop those
URLs as duplicates of a seen record forgotten under it."""

from __future__ import annotations

import time
from typing import Any

from scrapy_clustersync.store import Ack, JobStore, StartDone, make_client
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

from support import joined, push_op

BEAT: dict[str, Any] = {"lease_ms": 60_000, "info": {}, "idle": True, "idle_after_ms": 1,
                        "lease_ids": []}


def test_forget_seen_waits_for_the_nodes_a_finished_job_kept_open(
    redis_server: RedisServer,
) -> None:
    # given a job that finished while its node a stays open (a DontCloseSpider), live
    a, epoch = joined(redis_server, "a")
    a.flush(epoch, [push_op("http://x/1"), StartDone()], new_call_id())
    [(entry, _, _)] = a.lease(epoch, 1, 60_000, new_call_id())
    a.flush(epoch, [Ack(entry)], new_call_id())
    # (idle for idle_after_ms = 1: the heartbeat after the one that made it idle, a ms later)
    a.heartbeat(epoch, ttl_ms=60_000, **BEAT)
    time.sleep(0.002)
    assert a.heartbeat(epoch, ttl_ms=60_000, **BEAT).finished
    # when a new node joins it with "forget-seen"
    b = JobStore(make_client(redis_server.url), "job", "b")
    held = b.join_node(10_000, recrawl="forget-seen")
    # then it is not restarted: the seen record stays, and the node is told why
    assert held.finished is not None and held.restarted == "held"
    assert b.status().seen == 1
    # when node a leaves, then the next such join restarts it and forgets the seen record
    a.heartbeat(epoch, ttl_ms=0, **BEAT)
    restarted = b.join_node(10_000, recrawl="forget-seen")
    assert restarted.finished is None and restarted.restarted == "forget-seen"
    assert b.status().seen == 0
