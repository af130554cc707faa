"""Attacks on the frontier against a real redis-server: leases that end in every way (released,
expired and reclaimed, a node declared dead, a late ack, a retried call), odd sites and
priorities, with the frontier's invariants checked after every step: nothing lost, nothing
handed out twice while leased, counts that add up, no key left behind."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.store import (
    Ack,
    DeadLetterEntry,
    JobStore,
    Push,
    PushFlags,
    Release,
    make_client,
)
from scrapy_clustersync.store.consistency import JobCheck
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.keys import JobKeys
from testkit.redis_server import RedisServer

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()
LONG_MS = 600_000
#: sites as Scrapy's download slot keys may be: ports, a custom slot with odd characters
SITES = ["a.test", "b.test:8080", "slot:with:colons", "x|y", "é.test", "sp ace", "*"]
PRIORITIES = [0, 1, -3, 7, 10**15, -(10**12), 123456789012345678]
FLAGS = [0, int(PushFlags.START), int(PushFlags.LIFO), int(PushFlags.START | PushFlags.LIFO)]


def push(url: str, priority: int = 0, site: str = "a.test", flags: int = 0) -> Push:
    request = Request(url, priority=priority)
    return Push(FINGERPRINTER.fingerprint(request), priority, CODEC.encode(request), flags, site)


def joined(redis_server: RedisServer, node: str) -> tuple[JobStore, str]:
    store = JobStore(make_client(redis_server.url), "job", node)
    epoch, _ = store.join(ttl_ms=LONG_MS)
    return store, epoch


def beat(store: JobStore, epoch: str, ttl_ms: int = LONG_MS, lease_ids: tuple[str, ...] = ()):
    return store.heartbeat(epoch, ttl_ms=ttl_ms, lease_ms=LONG_MS, info={}, idle=False,
                           idle_after_ms=0, lease_ids=list(lease_ids))


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def frontier_state(client: redis.Redis, keys: JobKeys) -> dict[str, object]:
    """Every frontier structure, read whole (the test's jobs are small)."""
    prefix = keys.frontier
    lists: dict[tuple[str, str], list[bytes]] = {}
    ready: dict[str, set[str]] = {}
    for raw in client.scan_iter(match=prefix + "*"):
        name = text(raw)[len(prefix):]
        if name.startswith("q:"):
            kind, prio, site = name[2:].split(":", 2)
            lists[(f"{kind}:{prio}", site)] = list(client.lrange(raw, 0, -1))
        elif name.startswith("ready:"):
            ready[name[6:]] = {text(s) for s in client.zrange(raw, 0, -1)}
    return {
        "lists": lists, "ready": ready,
        "classes": {text(c) for c in client.zrange(keys.frontier_classes, 0, -1)},
        "sites": {text(s): v for s, v in client.zrange(keys.frontier_sites, 0, -1,
                                                      withscores=True)},
        "requeued": {text(i): text(s) for i, s in client.hgetall(keys.frontier_requeued).items()},
        "meta": {text(f): text(v) for f, v in client.hgetall(keys.meta).items()},
        "entries": {text(i) for i in client.hkeys(keys.entries)},
        "legacy": {text(i) for i in client.zrange(keys.queue, 0, -1)},
        "leased": {text(i) for i in client.hkeys(keys.leased)},
        "deadlines": {text(i) for i in client.zrange(keys.deadlines, 0, -1)},
    }


def assert_frontier_invariants(client: redis.Redis, keys: JobKeys) -> None:
    s = frontier_state(client, keys)
    lists, ready, requeued = s["lists"], s["ready"], s["requeued"]
    assert isinstance(lists, dict) and isinstance(ready, dict) and isinstance(requeued, dict)
    # a site is in its class's ready set exactly while its list is not empty
    assert {(c, site) for c, sites in ready.items() for site in sites} == set(lists)
    # a class is in f:classes exactly while its ready set is not empty
    assert s["classes"] == set(ready)
    ids_in_lists = [text(item.split(b"\t", 1)[0]) for items in lists.values() for item in items]
    assert len(ids_in_lists) == len(set(ids_in_lists)), "an entry queued twice"
    # the requeued hash records only entries that sit in a list
    assert set(requeued) <= set(ids_in_lists), "f:requeued keeps entries no list holds"
    live = Counter()
    size = 0
    for (_, site), items in lists.items():
        for item in items:
            size += len(item)
            if not requeued.get(text(item.split(b"\t", 1)[0]), "").startswith("d"):
                live[site] += 1
    meta = s["meta"]
    assert isinstance(meta, dict)
    assert int(meta.get("fqueued", 0)) == sum(live.values())
    assert int(meta.get("fbytes", 0)) == size
    assert s["sites"] == {site: float(n) for site, n in live.items() if n}
    # an entry is queued in one place or leased, never both
    assert not set(ids_in_lists) & (s["leased"] | s["entries"] | s["legacy"])
    assert s["leased"] == s["deadlines"]
    assert s["entries"] == s["legacy"] | s["leased"]


@dataclass
class Model:
    """What the test knows: each request's entry id, who holds which lease, what was acked."""

    url_of: dict[str, str] = field(default_factory=dict)
    holder: dict[str, tuple[str, bool]] = field(default_factory=dict)  # id -> (node, lasting)
    acked: set[str] = field(default_factory=set)
    pushed: list[str] = field(default_factory=list)
    handed: Counter[str] = field(default_factory=Counter)

    def took(self, node: str, entries: list, lasting: bool) -> None:
        for entry_id, blob, _ in entries:
            url = CODEC.decode(blob).url
            assert entry_id not in self.acked, f"{url} handed out again after its ack"
            held = self.holder.get(entry_id)
            assert held is None or not held[1] or held[0] == node, (
                f"{url} handed to {node} while leased to {held[0]}")
            self.url_of[entry_id] = url
            self.holder[entry_id] = (node, lasting)
            self.handed[url] += 1


def test_random_lease_endings_lose_nothing_hand_out_nothing_twice_and_keep_the_counts(
    redis_server: RedisServer,
) -> None:
    # given two nodes pushing requests of odd sites, priorities and flags, and leasing them in
    # every way a lease can end: acked, released, expired and reclaimed, returned by a
    # heartbeat that declared the node dead, acked late after that, calls retried
    rng = random.Random(20261203)
    client = make_client(redis_server.url)
    stores = dict(n1=joined(redis_server, "n1"), n2=joined(redis_server, "n2"))
    keys = stores["n1"][0].keys
    model = Model()
    serial = 0
    for step in range(400):
        name = rng.choice(["n1", "n2"])
        store, epoch = stores[name]
        action = rng.random()
        if action < 0.25:
            ops = []
            for _ in range(rng.randint(1, 6)):
                serial += 1
                url = f"http://u.test/{serial}"
                ops.append(push(url, rng.choice(PRIORITIES), rng.choice(SITES), rng.choice(FLAGS)))
                model.pushed.append(url)
            call_id = new_call_id()
            store.flush(epoch, ops, call_id)
            if rng.random() < 0.3:
                store.flush(epoch, ops, call_id)  # a retry: nothing more
        elif action < 0.55:
            lasting = rng.random() < 0.6
            call_id = new_call_id()
            got = store.lease(epoch, rng.randint(1, 8), LONG_MS if lasting else 0, call_id)
            model.took(name, list(got), lasting)
            if rng.random() < 0.3:
                again = store.lease(epoch, 8, LONG_MS if lasting else 0, call_id)
                assert {e for e, _, _ in again} <= {e for e, _, _ in got}
                model.took(name, list(again), lasting)
        elif action < 0.85:
            # this node ends some of what it held (or holds no more: a late ack or release)
            mine = [i for i, (n, _) in model.holder.items() if n == name]
            ops, acks = [], []
            for entry_id in rng.sample(mine, min(len(mine), rng.randint(1, 4))):
                choice = rng.random()
                if choice < 0.6:
                    ops.append(Ack(entry_id))
                    acks.append(entry_id)
                elif choice < 0.9:
                    ops.append(Release(entry_id))
                else:
                    # a dead letter ends a lease; an entry queued again stays queued
                    ops.append(DeadLetterEntry(entry_id, "attack"))
                    if client.hexists(keys.leased, entry_id):
                        acks.append(entry_id)
                del model.holder[entry_id]
            if ops:
                call_id = new_call_id()
                result = store.flush(epoch, ops, call_id)
                assert store.flush(epoch, ops, call_id) == result
                model.acked.update(acks)
        else:
            # the other node is declared dead by this one's heartbeat (its liveness ran out),
            # and comes back: what it held goes back to the queue, its lasting leases too
            other = "n2" if name == "n1" else "n1"
            other_store, other_epoch = stores[other]
            beat(other_store, other_epoch, ttl_ms=1)
            time.sleep(0.005)
            answer = beat(store, epoch)
            assert [d.node for d in answer.declared_dead] == [other]
            beat(other_store, other_epoch)
            for entry_id, (holder, _) in list(model.holder.items()):
                if holder == other:
                    model.holder[entry_id] = (holder, False)
        assert_frontier_invariants(client, keys)
    # when every request left is leased and acked
    for _ in range(200):
        store, epoch = stores["n1"]
        got = list(store.lease(epoch, 50, LONG_MS, new_call_id()))
        if not got:
            break
        model.took("n1", got, True)
        store.flush(epoch, [Ack(e) for e, _, _ in got], new_call_id())
        model.acked.update(e for e, _, _ in got)
        assert_frontier_invariants(client, keys)
    for name in ("n1", "n2"):  # what the nodes still hold from lasting leases
        store, epoch = stores[name]
        held = [i for i, (n, _) in model.holder.items() if n == name and i not in model.acked]
        store.flush(epoch, [Ack(i) for i in held], new_call_id())
    # then every request was handed out, nothing is queued or leased, the check finds nothing
    # and no key of the frontier is left
    assert set(model.pushed) <= set(model.handed)
    status = stores["n1"][0].status()
    assert (status.queued, status.leased) == (0, 0)
    assert JobCheck(stores["n1"][0]).run() == []
    assert client.keys(keys.frontier + "*") == []
