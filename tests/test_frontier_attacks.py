"""Attacks on the frontier against a real redis-server: leases that end in every way (released,
expired and reclaimed, a node declared dead, a late ack, a retried call), odd sites and
priorities, sites pinned to regions and moved between them while their requests are queued and
leased, with the frontier's invariants checked after every step: nothing lost, nothing handed
out twice while leased, counts that add up, no key left behind, a node handed another region's
sites only when it has nothing else."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
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
from scrapy_clustersync.store.lease_script import LeasePace
from scrapy_clustersync.store.region_pins import pin_sites, read_pins
from scrapy_clustersync.store.script_results import Heartbeat, Leased
from testkit.redis_server import RedisServer

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()
LONG_MS = 600_000
#: sites as Scrapy's download slot keys may be: ports, a custom slot with odd characters
SITES = ["a.test", "b.test:8080", "slot:with:colons", "x|y", "é.test", "sp ace", "*", ""]
#: "" is no site known: the legacy queue, as an op spooled by an earlier version
PRIORITIES = [0, 1, -3, 7, 10**15, -(10**12), 123456789012345678]
FLAGS = [0, int(PushFlags.START), int(PushFlags.LIFO), int(PushFlags.START | PushFlags.LIFO)]
#: the regions of the nodes n1 and n2 when the attack pins sites ("" pins to none)
REGIONS = {"n1": "eu", "n2": "us"}


def push(url: str, priority: int = 0, site: str = "a.test", flags: int = 0) -> Push:
    request = Request(url, priority=priority)
    return Push(FINGERPRINTER.fingerprint(request), priority, CODEC.encode(request), flags, site)


def joined(redis_server: RedisServer, node: str) -> tuple[JobStore, str]:
    store = JobStore(make_client(redis_server.url), "job", node)
    epoch, _ = store.join(ttl_ms=LONG_MS)
    return store, epoch


def beat(store: JobStore, epoch: str, ttl_ms: int = LONG_MS) -> Heartbeat:
    return store.heartbeat(epoch, ttl_ms=ttl_ms, lease_ms=LONG_MS, info={}, idle=False,
                           idle_after_ms=0, lease_ids=[])


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def names(values: Any) -> set[str]:
    return {text(value) for value in values}


@dataclass(frozen=True)
class FrontierState:
    """Every frontier structure, and the entries, leases and legacy queue, read whole."""

    lists: dict[tuple[str, str], list[bytes]]  # (class, site) -> items
    ready: dict[str, set[str]]  # class -> sites
    rest: dict[str, set[str]]  # class -> sites
    classes: set[str]
    sites: dict[str, float]
    requeued: dict[str, str]
    meta: dict[str, str]
    entries: set[str]
    legacy: set[str]
    leased: set[str]
    deadlines: set[str]

    @classmethod
    def read(cls, client: redis.Redis, keys: JobKeys) -> FrontierState:
        prefix = keys.frontier
        lists: dict[tuple[str, str], list[bytes]] = {}
        ready: dict[str, set[str]] = {}
        rest: dict[str, set[str]] = {}
        for raw in client.scan_iter(match=prefix + "*"):
            name = text(raw)[len(prefix):]
            if name.startswith("q:"):
                kind, prio, site = name[2:].split(":", 2)
                items: list[Any] = list(client.lrange(raw, 0, -1))
                lists[(f"{kind}:{prio}", site)] = items
            elif name.startswith("ready:"):
                ready[name[6:]] = names(client.zrange(raw, 0, -1))
            elif name.startswith("rest:"):
                rest[name[5:]] = names(client.zrange(raw, 0, -1))
        return cls(
            lists, ready, rest, names(client.zrange(keys.frontier_classes, 0, -1)),
            {text(site): float(n) for site, n in scored(client, keys.frontier_sites)},
            {text(i): text(v) for i, v in client.hgetall(keys.frontier_requeued).items()},
            {text(f): text(v) for f, v in client.hgetall(keys.meta).items()},
            names(client.hkeys(keys.entries)), names(client.zrange(keys.queue, 0, -1)),
            names(client.hkeys(keys.leased)), names(client.zrange(keys.deadlines, 0, -1)))


def scored(client: redis.Redis, key: str) -> list[tuple[Any, float]]:
    pairs: list[Any] = list(client.zrange(key, 0, -1, withscores=True))
    return pairs


def item_id(item: bytes) -> str:
    return item.split(b"\t", 1)[0].decode()


def assert_frontier_invariants(client: redis.Redis, keys: JobKeys) -> None:
    s = FrontierState.read(client, keys)
    # a site is in its class's ready or rest set (not both) exactly while its list is not empty
    ready = [(c, site) for c, sites in s.ready.items() for site in sites]
    resting = [(c, site) for c, sites in s.rest.items() for site in sites]
    assert not set(ready) & set(resting)
    assert set(ready) | set(resting) == set(s.lists)
    # a class is in f:classes exactly while its ready or rest set is not empty
    assert s.classes == set(s.ready) | set(s.rest)
    ids_in_lists = [item_id(item) for items in s.lists.values() for item in items]
    assert len(ids_in_lists) == len(set(ids_in_lists)), "an entry queued twice"
    # the requeued hash records only entries that sit in a list
    assert set(s.requeued) <= set(ids_in_lists), "f:requeued keeps entries no list holds"
    live: Counter[str] = Counter()
    for (_, site), items in s.lists.items():
        live[site] += sum(not s.requeued.get(item_id(i), "").startswith("d") for i in items)
    assert int(s.meta.get("fqueued", 0)) == sum(live.values())
    assert int(s.meta.get("fbytes", 0)) == sum(len(i) for items in s.lists.values()
                                               for i in items)
    assert s.sites == {site: float(n) for site, n in live.items() if n}
    # an entry is queued in one place or leased, never both
    assert not set(ids_in_lists) & (s.leased | s.entries | s.legacy)
    assert s.leased == s.deadlines
    assert s.entries == s.legacy | s.leased


@dataclass
class Model:
    """What the test knows: each request's entry id, who holds which lease, what was acked."""

    holder: dict[str, tuple[str, bool]] = field(default_factory=dict)  # id -> (node, lasting)
    site_of: dict[str, str] = field(default_factory=dict)  # url -> its site
    acked: set[str] = field(default_factory=set)
    pushed: list[str] = field(default_factory=list)
    handed: Counter[str] = field(default_factory=Counter)

    def took(self, node: str, entries: list[Leased], lasting: bool) -> None:
        for entry_id, blob, _ in entries:
            url = CODEC.decode(blob).url
            assert entry_id not in self.acked, f"{url} handed out again after its ack"
            held = self.holder.get(entry_id)
            assert held is None or not held[1] or held[0] == node, (
                f"{url} handed to {node} while leased to {held[0]}")
            self.holder[entry_id] = (node, lasting)
            self.handed[url] += 1

    def held_by(self, node: str) -> list[str]:
        return [i for i, (n, _) in self.holder.items() if n == node and i not in self.acked]


class Attack:
    """Two nodes that push, lease and end their leases at random (rng), against ``model``."""

    def __init__(self, redis_server: RedisServer, rng: random.Random, paced: bool,
                 regions: bool = False) -> None:
        self.rng, self.model, self.serial, self.regions = rng, Model(), 0, regions
        self.client = make_client(redis_server.url)
        self.stores = dict(n1=joined(redis_server, "n1"), n2=joined(redis_server, "n2"))
        self.keys = self.stores["n1"][0].keys
        if paced:  # sites slow enough that leases pass them over and they rest
            pace = LeasePace(on=True, delay_s=0.002,
                             site_delays={"a.test": 2.0, "x|y": 0.5, "*": 0.3})
            for store, _ in self.stores.values():
                store.set_lease_pace(pace)
        if regions:
            for name, (store, _) in self.stores.items():
                store.set_region(REGIONS[name])

    def queue_as_an_earlier_version(self) -> None:
        """Entries in the legacy queue, and leases of n2 whose values name no site."""
        client, keys = self.client, self.keys
        now_ms = int(client.time()[0]) * 1000
        for n in range(6):
            entry_id, url = f"0{n:016x}cafe0000", f"http://old.test/{n}"
            client.hset(keys.entries, entry_id, CODEC.encode(Request(url, priority=-n)))
            if n % 2:
                client.zadd(keys.queue, {entry_id: n})
            else:
                client.hset(keys.leased, entry_id, f"{n}|n2")
                client.zadd(keys.deadlines, {entry_id: now_ms + LONG_MS})
                self.model.holder[entry_id] = ("n2", True)
                self.model.handed[url] += 1
            self.model.pushed.append(url)
        client.hincrby(keys.stats, "pushed", 6)

    def step(self, name: str) -> None:
        action = self.rng.random()
        if self.regions and action < 0.08:
            self.pin()
        elif action < 0.25:
            self.push(name)
        elif action < 0.55:
            self.lease(name)
        elif action < 0.85:
            self.end_leases(name)
        else:
            self.declare_dead(name)

    def push(self, name: str) -> None:
        store, epoch = self.stores[name]
        rng, ops = self.rng, []
        for _ in range(rng.randint(1, 6)):
            self.serial += 1
            url = f"http://u.test/{self.serial}"
            site = rng.choice(SITES)
            ops.append(push(url, rng.choice(PRIORITIES), site, rng.choice(FLAGS)))
            self.model.pushed.append(url)
            self.model.site_of[url] = site
        call_id = new_call_id()
        store.flush(epoch, ops, call_id)
        if rng.random() < 0.3:
            store.flush(epoch, ops, call_id)  # a retry: nothing more

    def lease(self, name: str) -> None:
        store, epoch = self.stores[name]
        lasting = self.rng.random() < 0.6  # else a lease that has expired at once
        lease_ms, call_id = LONG_MS if lasting else 0, new_call_id()
        foreign = not self.regions or self.rng.random() < 0.3
        pins = read_pins(store)
        got = list(store.lease(epoch, self.rng.randint(1, 8), lease_ms, call_id, foreign=foreign))
        self.model.took(name, got, lasting)
        if not foreign:  # only its own region's sites and those of none
            regions = {pins.get(self.model.site_of.get(CODEC.decode(b).url, ""), "")
                       for _, b, _ in got}
            assert regions <= {"", REGIONS[name]}, f"{name} was handed sites of {regions}"
        if self.rng.random() < 0.3:
            again = list(store.lease(epoch, 8, lease_ms, call_id))
            assert {e for e, _, _ in again} <= {e for e, _, _ in got}
            self.model.took(name, again, lasting)

    def pin(self) -> None:
        """Pin a few sites to a region, or to none, while they have requests queued and
        leased (a site pinned is no site of the legacy queue: "" is none)."""
        store = self.stores["n1"][0]
        pins = {site: self.rng.choice(["eu", "us", ""])
                for site in self.rng.sample([s for s in SITES if s], 2)}
        pin_sites(store, pins)
        assert {site: read_pins(store).get(site, "") for site in pins} == pins

    def end_leases(self, name: str) -> None:
        """Ack, release or dead-letter some of what ``name`` held (or holds no more: its lease
        ended, and it comes late), each flush sent twice."""
        store, epoch = self.stores[name]
        mine = self.model.held_by(name)
        ops: list[Ack | Release | DeadLetterEntry] = []
        acks = []
        for entry_id in self.rng.sample(mine, min(len(mine), self.rng.randint(1, 4))):
            choice = self.rng.random()
            if choice < 0.6:
                ops.append(Ack(entry_id))
                acks.append(entry_id)
            elif choice < 0.9:
                ops.append(Release(entry_id))
            else:
                # a dead letter ends a lease; an entry queued again stays queued
                ops.append(DeadLetterEntry(entry_id, "attack"))
                if self.client.hexists(self.keys.leased, entry_id):
                    acks.append(entry_id)
            del self.model.holder[entry_id]
        if ops:
            call_id = new_call_id()
            result = store.flush(epoch, ops, call_id)
            assert store.flush(epoch, ops, call_id) == result
            self.model.acked.update(acks)

    def declare_dead(self, name: str) -> None:
        """The other node's liveness runs out and ``name``'s heartbeat declares it dead (its
        leases go back to the queue), then it comes back."""
        other = "n2" if name == "n1" else "n1"
        other_store, other_epoch = self.stores[other]
        beat(other_store, other_epoch, ttl_ms=1)
        time.sleep(0.005)
        answer = beat(*self.stores[name])
        assert [d.node for d in answer.declared_dead] == [other]
        beat(other_store, other_epoch)
        for entry_id, (holder, _) in list(self.model.holder.items()):
            if holder == other:
                self.model.holder[entry_id] = (holder, False)

    def drain(self) -> None:
        """n1 leases with no pace (the resting sites too) and acks what is queued; each node
        acks what it still holds."""
        store, epoch = self.stores["n1"]
        store.set_lease_pace(LeasePace())
        for _ in range(200):
            batch = store.lease(epoch, 50, LONG_MS, new_call_id())
            if not batch and batch.retry_s is None:
                break
            self.model.took("n1", list(batch), True)
            store.flush(epoch, [Ack(e) for e, _, _ in batch], new_call_id())
            self.model.acked.update(e for e, _, _ in batch)
            assert_frontier_invariants(self.client, self.keys)
        for name, (each, each_epoch) in self.stores.items():
            each.flush(each_epoch, [Ack(i) for i in self.model.held_by(name)], new_call_id())


@pytest.mark.parametrize(("paced", "regions"), [(False, False), (True, False), (True, True)],
                         ids=["unpaced", "paced", "paced-regions"])
def test_random_lease_endings_lose_nothing_hand_out_nothing_twice_and_keep_the_counts(
    redis_server: RedisServer, paced: bool, regions: bool,
) -> None:
    # given two nodes pushing requests of odd sites, priorities and flags, and leasing them in
    # every way a lease can end: acked, released, dead-lettered, expired and reclaimed,
    # returned by a heartbeat that declared the node dead, acked late after that, calls
    # retried; and a job an earlier version queued (and with regions: the nodes in two
    # regions, sites pinned and moved between them all along)
    attack = Attack(redis_server, random.Random(20261203), paced, regions)
    attack.queue_as_an_earlier_version()
    for step in range(400):
        name = attack.rng.choice(["n1", "n2"])
        attack.step(name)
        # then after every step the frontier's invariants hold, and its counts add up
        assert_frontier_invariants(attack.client, attack.keys)
        if step % 25 == 0:
            findings = JobCheck(attack.stores[name][0]).run()
            assert [f for f in findings if f.kind == "counts"] == []
    # and when every request left is leased and acked: every request was handed out, nothing
    # is queued or leased, the check finds nothing, and no key of the frontier is left
    attack.drain()
    assert set(attack.model.pushed) <= set(attack.model.handed)
    store = attack.stores["n1"][0]
    status = store.status()
    assert (status.queued, status.leased) == (0, 0)
    assert JobCheck(store).run() == []
    left = {text(key) for key in attack.client.keys(attack.keys.frontier + "*")}
    assert left == ({attack.keys.frontier_regions} if read_pins(store) else set())


def test_a_slow_site_of_many_priorities_does_not_hold_back_a_ready_site_of_a_lower_one(
    redis_server: RedisServer,
) -> None:
    # given a slow site (a minute between requests) with requests of 20 priorities, one of
    # which a lease already handed out, so that the site may start no other for a minute
    store, epoch = joined(redis_server, "n1")
    store.set_lease_pace(LeasePace(on=True, site_delays={"slow.test": 60.0}))
    store.flush(epoch, [push(f"http://slow.test/{p}", 100 + p, "slow.test")
                        for p in range(21)], new_call_id())
    assert [CODEC.decode(b).url for _, b, _ in store.lease(epoch, 5, LONG_MS, new_call_id())] \
        == ["http://slow.test/20"]
    # and a fast site with a request of a lower priority than all of them
    store.flush(epoch, [push("http://fast.test/0", 0, "fast.test")], new_call_id())
    # when a node leases
    got = [CODEC.decode(b).url for _, b, _ in store.lease(epoch, 5, LONG_MS, new_call_id())]
    # then it gets the fast site's request now, not after the slow site's minute
    assert got == ["http://fast.test/0"]


def test_many_sites_that_may_not_start_a_request_hold_back_no_ready_site_of_a_lower_priority(
    redis_server: RedisServer,
) -> None:
    # given 600 slow sites (a minute between requests) with two requests each of priority 1,
    # the first of each already handed out, so that none may start another for a minute
    store, epoch = joined(redis_server, "n1")
    store.set_lease_pace(LeasePace(on=True, delay_s=60.0, site_delays={"fast.test": 0.0}))
    store.flush(epoch, [push(f"http://s{n}.test/{k}", 1, f"s{n}.test")
                        for n in range(600) for k in range(2)], new_call_id())
    first = [*store.lease(epoch, 1000, LONG_MS, new_call_id()),
             *store.lease(epoch, 1000, LONG_MS, new_call_id())]
    assert len(first) == 600
    # and a fast site with a request of priority 0
    store.flush(epoch, [push("http://fast.test/0", 0, "fast.test")], new_call_id())
    # when a node leases
    batch = store.lease(epoch, 10, LONG_MS, new_call_id())
    # then it gets the fast site's request now (the slow sites wait for their next turn, which
    # the lease says), and the slow sites' requests stay queued
    assert [CODEC.decode(b).url for _, b, _ in batch] == ["http://fast.test/0"]
    assert store.status().queued == 600
    again = store.lease(epoch, 10, LONG_MS, new_call_id())
    assert list(again) == [] and again.retry_s is not None and 50 < again.retry_s <= 60
    assert_frontier_invariants(make_client(redis_server.url), store.keys)
    # and a node that leases with no pace (another politeness setting) gets them all now
    other, _ = joined(redis_server, "n2")
    unpaced = [*other.lease(epoch, 1000, LONG_MS, new_call_id()),
               *other.lease(epoch, 1000, LONG_MS, new_call_id())]
    assert sorted(CODEC.decode(b).url for _, b, _ in unpaced) == sorted(
        f"http://s{n}.test/1" for n in range(600))
    assert_frontier_invariants(make_client(redis_server.url), store.keys)


def test_a_lease_across_many_priorities_hands_them_out_best_first_and_empties_their_classes(
    redis_server: RedisServer,
) -> None:
    # given requests of 40 priorities (big, negative) over two sites, some priorities with
    # one request, some with more than one lease takes of them
    store, epoch = joined(redis_server, "n1")
    priorities = [p * 10**13 - 20 * 10**13 for p in range(40)]
    ops = [push(f"http://{site}.test/{p}/{n}", p, f"{site}.test")
           for p in priorities for site in ("a", "b") for n in range(1 + (p // 10**13) % 3)]
    rng = random.Random(7)
    rng.shuffle(ops)
    store.flush(epoch, ops, new_call_id())
    # when a node leases them, a few or many classes' worth at a time
    got: list[int] = []
    while batch := store.lease(epoch, rng.choice([7, 150]), LONG_MS, new_call_id()):
        got += [CODEC.decode(blob).priority for _, blob, _ in batch]
    # then every request came, best priority first, and no class is left behind
    assert got == sorted((op_priority(op) for op in ops), reverse=True)
    assert client_of(redis_server).keys(store.keys.frontier + "*") == []


def op_priority(op: Push) -> int:
    return op.priority


def client_of(redis_server: RedisServer) -> redis.Redis:
    return make_client(redis_server.url)


def test_a_retried_lease_of_a_node_declared_dead_does_not_hand_out_what_another_node_holds(
    redis_server: RedisServer,
) -> None:
    # given n1 leased two requests, but the answer was lost, and n1 was declared dead (its
    # leases went back to the queue) before it called again, and n2 leased them meanwhile
    n1, epoch = joined(redis_server, "n1")
    n2, _ = joined(redis_server, "n2")
    n1.flush(epoch, [push(f"http://a.test/{n}") for n in range(2)], new_call_id())
    call_id = new_call_id()
    first = n1.lease(epoch, 2, LONG_MS, call_id)
    beat(n1, epoch, ttl_ms=1)
    time.sleep(0.005)
    assert [d.node for d in beat(n2, epoch).declared_dead] == ["n1"]
    taken = n2.lease(epoch, 2, LONG_MS, new_call_id())
    assert {e for e, _, _ in taken} == {e for e, _, _ in first}
    # when n1's lease call is retried (the same call id)
    again = n1.lease(epoch, 2, LONG_MS, call_id)
    # then it gets none of them: they are n2's
    assert list(again) == []
    assert_frontier_invariants(make_client(redis_server.url), n1.keys)


def test_a_repaired_frontier_lease_goes_back_to_the_queue_once_and_is_crawled_once(
    redis_server: RedisServer,
) -> None:
    # given a request leased from the frontier whose lease deadline was lost (another program
    # wrote into the job), and another request of its site still queued
    store, epoch = joined(redis_server, "n1")
    client = make_client(redis_server.url)
    store.flush(epoch, [push("http://a.test/0", 3), push("http://a.test/1", 3)], new_call_id())
    [(entry_id, _, _)] = store.lease(epoch, 1, LONG_MS, new_call_id())
    client.zrem(store.keys.deadlines, entry_id)
    # when `clustersync check --repair` mends it (it returns to the queue: the legacy one, as
    # check does not know its site)
    found = JobCheck(store).run(repair=True)
    assert [(f.kind, f.subject) for f in found] == [("lease_without_deadline", entry_id)]
    assert_frontier_invariants(client, store.keys)
    # then a node leases it once, with the other request, and after their acks nothing is
    # left, and the check finds nothing
    got = [CODEC.decode(b).url for _, b, _ in store.lease(epoch, 10, LONG_MS, new_call_id())]
    assert sorted(got) == ["http://a.test/0", "http://a.test/1"]
    ids = [e for e, _, _ in store.lease(epoch, 10, LONG_MS, new_call_id())]
    assert ids == []
    leased_ids = [text(i) for i in client.hkeys(store.keys.leased)]
    store.flush(epoch, [Ack(i) for i in leased_ids], new_call_id())
    status = store.status()
    assert (status.queued, status.leased, status.counters["acked"]) == (0, 0, 2)
    assert JobCheck(store).run() == []
    assert client.keys(store.keys.frontier + "*") == []


@pytest.mark.parametrize("flags", [0, int(PushFlags.LIFO)], ids=["fifo", "lifo"])
def test_requests_a_node_releases_come_back_in_the_order_it_leased_them(
    redis_server: RedisServer, flags: int,
) -> None:
    # given a node that leased three of a site's four requests (FIFO or LIFO pushes)
    store, epoch = joined(redis_server, "n1")
    store.flush(epoch, [push(f"http://a.test/{n}", 0, "a.test", flags) for n in range(4)],
                new_call_id())
    leased = list(store.lease(epoch, 3, LONG_MS, new_call_id()))
    # when it releases them in one flush, in the order it leased them (as a closing node hands
    # back what it prefetched)
    store.flush(epoch, [Release(e) for e, _, _ in leased], new_call_id())
    # then the next lease hands them out in that order again, before the fourth
    again = list(store.lease(epoch, 10, LONG_MS, new_call_id()))
    urls = [CODEC.decode(b).url for _, b, _ in leased]
    assert [CODEC.decode(b).url for _, b, _ in again][:3] == urls
    assert len(again) == 4


def test_a_site_one_node_may_not_be_handed_more_of_is_still_handed_to_another(
    redis_server: RedisServer,
) -> None:
    # given a slow site (0.5 s between requests) and two live nodes, and n1 was handed what it
    # may start of it within its lease's second
    n1, epoch = joined(redis_server, "n1")
    n2, _ = joined(redis_server, "n2")
    pace = LeasePace(on=True, site_delays={"slow.test": 0.5})
    n1.set_lease_pace(pace)
    n2.set_lease_pace(pace)
    n1.flush(epoch, [push(f"http://slow.test/{n}", 0, "slow.test") for n in range(20)],
             new_call_id())
    assert len(n1.lease(epoch, 60, LONG_MS, new_call_id(), 1000)) == 3
    # when n1 asks again at once (it may start no more of it yet), and then n2 asks
    assert list(n1.lease(epoch, 60, LONG_MS, new_call_id(), 1000)) == []
    # then n2 is still handed the one the cluster may start for it: n1's own pace did not put
    # the site to rest for the whole cluster
    assert len(n2.lease(epoch, 60, LONG_MS, new_call_id(), 1000)) == 1
    assert_frontier_invariants(make_client(redis_server.url), n1.keys)
