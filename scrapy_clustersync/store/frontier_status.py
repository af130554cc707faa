"""What ``clustersync status JOB --sites`` shows of the frontier (lua/frontier.lua): requests
queued and their bytes, how many sites hold them (ready to be leased, or resting until their
pace lets one start), and the deepest sites, each ready or waiting for its next start. Read
only, three round trips, bounded whatever the job's size (the classes of the first
``CLASSES_COUNTED`` priorities are counted)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from .cluster_client import queue_server_time
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text


@dataclass(frozen=True)
class DeepSite:
    """One site of the frontier: requests queued, and seconds until it may start its next
    request (0: ready now; its delay, backoff, Retry-After or the pace of leases holds it)."""

    site: str
    queued: int
    wait_s: float


#: queue classes (priorities and kinds) whose ready and resting sites are counted at most
CLASSES_COUNTED = 100


@dataclass(frozen=True)
class FrontierStatus:
    """The frontier: requests queued, the bytes of their items, the sites that hold them, and
    the deepest of those sites; site lists by state, summed over the classes counted: ready
    (leased in turn) and resting (their pace lets none start yet)."""

    queued: int
    bytes: int
    sites: int
    deepest: list[DeepSite]
    ready: int = 0
    resting: int = 0


def read_frontier(client: redis.Redis, keys: JobKeys, limit: int) -> FrontierStatus:
    """The frontier's figures and its ``limit`` deepest sites."""
    with translate_errors(client):
        pipe = client.pipeline(transaction=False)
        queue_server_time(pipe, keys.meta)
        pipe.hmget(keys.meta, "fqueued", "fbytes")
        pipe.zcard(keys.frontier_sites)
        pipe.zrevrange(keys.frontier_sites, 0, limit - 1, withscores=True)
        pipe.zrange(keys.frontier_classes, 0, CLASSES_COUNTED - 1)
        (seconds, micros), (queued, size), sites, deepest, classes = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        pipe = client.pipeline(transaction=False)
        for site, _ in deepest:
            pipe.hmget(keys.site(as_text(site)), "tat_ms", "blocked_ms", "lease_due_ms")
        for each in map(as_text, classes):
            kind, _, priority = each.partition(":")
            pipe.zcard(keys.frontier_ready(int(kind), priority))
            pipe.zcard(keys.frontier_rest(int(kind), priority))
        replies = pipe.execute()
        states, counts = replies[:len(deepest)], replies[len(deepest):]
    shown = []
    for (site, count), state in zip(deepest, states, strict=True):
        due_ms = max((float(value) for value in state if value is not None), default=now_ms)
        shown.append(DeepSite(as_text(site), int(count), max(0.0, due_ms - now_ms) / 1000))
    return FrontierStatus(int(queued or 0), int(size or 0), int(sites), shown,
                          ready=sum(counts[0::2]), resting=sum(counts[1::2]))
