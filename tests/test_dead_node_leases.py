"""A dead node's leases against a real redis-server: every one back in the queue exactly once,
a bounded number per script call, in the order the node leased them (so FIFO and LIFO order
within a site holds after a death); leases written before the lease index existed still come
back; late acks of the node thought dead neither queue a request twice nor hand it out again."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
import redis
from test_frontier_attacks import CODEC, LONG_MS, assert_frontier_invariants, beat, push, text

from scrapy_clustersync.store import Ack, JobStore, PushFlags, make_client
from scrapy_clustersync.store.consistency import JobCheck
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.lease_script import RECLAIMED_LEASES_PER_LEASE_CALL
from scrapy_clustersync.store.script_results import Leased
from testkit.redis_server import RedisServer

#: heartbeat.lua's DEAD_LEASES_PER_BEAT and UNINDEXED_LEASES_PER_BEAT
PER_BEAT = 250
#: an HSCAN step may return a little more than its COUNT (whole buckets)
SWEPT_PER_BEAT_AT_MOST = 2 * PER_BEAT
SITES = ["a.test", "b.test", "c.test"]


def joined(redis_server: RedisServer, node: str, job: str = "job") -> tuple[JobStore, str]:
    store = JobStore(make_client(redis_server.url), job, node)
    epoch, _ = store.join(ttl_ms=LONG_MS)
    return store, epoch


def fill(store: JobStore, epoch: str, count: int, flags: int = 0) -> None:
    """``count`` requests over SITES, each site's numbered in push order."""
    ops = [push(f"http://{SITES[n % 3]}/{n}", 0, SITES[n % 3], flags) for n in range(count)]
    for first in range(0, count, 500):
        store.flush(epoch, ops[first:first + 500], new_call_id())


def lease_all(store: JobStore, epoch: str, count: int, per_call: int = 200) -> list[Leased]:
    got: list[Leased] = []
    while len(got) < count:
        batch = list(store.lease(epoch, min(per_call, count - len(got)), LONG_MS, new_call_id()))
        if not batch:
            break
        got += batch
    return got


def by_site(entries: list[Leased]) -> dict[str, list[str]]:
    """Each site's URLs in the order given."""
    urls: dict[str, list[str]] = defaultdict(list)
    for _, blob, _ in entries:
        url = CODEC.decode(blob).url
        urls[url.split("/")[2]].append(url)
    return dict(urls)


def die(store: JobStore, epoch: str) -> None:
    """``store``'s node beats a last time, live for 1 ms more."""
    beat(store, epoch, ttl_ms=1)
    time.sleep(0.01)


def reclaimed(store: JobStore) -> int:
    return store.status().counters.get("reclaimed", 0)


def assert_index_holds(client: redis.Redis, keys: JobKeys) -> None:
    """The lease index names exactly the leased entries."""
    indexed = {text(i) for i in client.zrange(keys.node_leases, 0, -1)}
    assert indexed == {text(i) for i in client.hkeys(keys.leased)}


def drop_index(client: redis.Redis, keys: JobKeys, sweep: bool = True) -> None:
    """Make the job's leases look written by a version without the index (``sweep``: its sweep
    not started yet; else over, as if an older node wrote them after it)."""
    client.delete(keys.node_leases, keys.node_numbers)
    client.hdel(keys.meta, "node_numbered")
    if sweep:
        client.hdel(keys.meta, "lease_sweep")
    else:
        client.hset(keys.meta, "lease_sweep", "done")


@pytest.mark.parametrize("flags", [0, int(PushFlags.LIFO)], ids=["fifo", "lifo"])
def test_a_dead_node_s_leases_come_back_once_a_slice_per_beat_in_the_order_it_leased_them(
    redis_server: RedisServer, flags: int,
) -> None:
    # given the same 1,300 requests in two jobs, and in each a node that leases 1,200 of them
    client = make_client(redis_server.url)
    reference, ref_epoch = joined(redis_server, "ref", job="ref")
    fill(reference, ref_epoch, 1300, flags)
    expected = by_site(lease_all(reference, ref_epoch, 1300))
    dying, epoch = joined(redis_server, "dying")
    fill(dying, epoch, 1300, flags)
    held = lease_all(dying, epoch, 1200)
    assert len(held) == 1200
    # when the node dies and another node's heartbeats declare it dead and go on beating
    die(dying, epoch)
    alive, _ = joined(redis_server, "alive")
    answer = beat(alive, epoch)
    assert [(d.node, d.leases) for d in answer.declared_dead] == [("dying", 1200)]
    queued = [alive.status().queued]
    while client.exists(alive.keys.reclaiming):
        assert_frontier_invariants(client, alive.keys)
        assert_index_holds(client, alive.keys)
        beat(alive, epoch)
        queued.append(alive.status().queued)
    # then each beat returned 250 at most (the declaring one first), all 1,200 came back
    steps = [b - a for a, b in zip([100, *queued], queued, strict=False)]
    assert steps == [PER_BEAT] * 4 + [200]
    assert reclaimed(alive) == 1200
    # and the next node to lease gets each request once, each site's in the order one node
    # would have had them with no death: the order of their pushes, FIFO or LIFO
    again = lease_all(alive, epoch, 2000)
    assert sorted(e for e, _, _ in again) == sorted({e for e, _, _ in again})
    assert {e for e, _, _ in held} <= {e for e, _, _ in again} and len(again) == 1300
    assert by_site(again) == expected
    alive.flush(epoch, [Ack(e) for e, _, _ in again], new_call_id())
    assert_frontier_invariants(client, alive.keys)
    assert client.exists(alive.keys.node_leases, alive.keys.reclaiming) == 0


def test_lease_calls_alone_return_a_dead_node_s_leases_a_bounded_number_each(
    redis_server: RedisServer,
) -> None:
    # given a node holding 900 leases, declared dead by another's heartbeat (250 back then)
    client = make_client(redis_server.url)
    dying, epoch = joined(redis_server, "dying")
    fill(dying, epoch, 900)
    held = {e for e, _, _ in lease_all(dying, epoch, 900)}
    die(dying, epoch)
    alive, _ = joined(redis_server, "alive")
    beat(alive, epoch)
    assert reclaimed(alive) == PER_BEAT
    # when the other node only leases (and acks), with no heartbeat
    got: list[str] = []
    counts = []
    for _ in range(100):
        before = reclaimed(alive)
        batch = list(alive.lease(epoch, 30, LONG_MS, new_call_id()))
        counts.append(reclaimed(alive) - before)
        got += [e for e, _, _ in batch]
        alive.flush(epoch, [Ack(e) for e, _, _ in batch], new_call_id())
        assert_index_holds(client, alive.keys)
        if not batch:
            break
    # then each lease call returned 50 at most, and every request came back once
    assert max(counts) == RECLAIMED_LEASES_PER_LEASE_CALL
    assert sum(counts) == 900 - PER_BEAT
    assert sorted(got) == sorted(held)
    assert_frontier_invariants(client, alive.keys)
    assert client.exists(alive.keys.node_leases, alive.keys.reclaiming) == 0


def test_leases_with_no_index_entry_come_back_when_their_node_dies(
    redis_server: RedisServer,
) -> None:
    # given a node holding 1,000 leases written before the index existed
    client = make_client(redis_server.url)
    dying, epoch = joined(redis_server, "dying")
    fill(dying, epoch, 1000)
    held = {e for e, _, _ in lease_all(dying, epoch, 1000)}
    die(dying, epoch)
    drop_index(client, dying.keys)
    # when it is dead and another node's heartbeats sweep the leases
    alive, _ = joined(redis_server, "alive")
    answer = beat(alive, epoch)
    assert [d.node for d in answer.declared_dead] == ["dying"]
    queued = [alive.status().queued]
    for _ in range(20):
        if text(client.hget(alive.keys.meta, "lease_sweep")) == "done":
            break
        beat(alive, epoch)
        queued.append(alive.status().queued)
    # then a bounded number came back per beat until the sweep was over, and then no more
    # sweeping; every request comes back once
    steps = [b - a for a, b in zip([0, *queued], queued, strict=False)]
    assert len(steps) > 2 and max(steps) <= SWEPT_PER_BEAT_AT_MOST
    assert alive.status().queued == 1000 and client.hlen(alive.keys.leased) == 0
    beat(alive, epoch)
    assert text(client.hget(alive.keys.meta, "lease_sweep")) == "done"
    again = lease_all(alive, epoch, 2000)
    assert sorted(e for e, _, _ in again) == sorted(held)
    assert_frontier_invariants(client, alive.keys)


def test_leases_with_no_index_entry_of_a_live_node_are_indexed_and_come_back_at_its_death(
    redis_server: RedisServer,
) -> None:
    # given a live node holding 600 leases written before the index existed
    client = make_client(redis_server.url)
    old, epoch = joined(redis_server, "old")
    fill(old, epoch, 600)
    held = {e for e, _, _ in lease_all(old, epoch, 600)}
    drop_index(client, old.keys)
    # when another node's heartbeats sweep them while it lives, and then it dies
    other, _ = joined(redis_server, "other")
    for _ in range(20):
        beat(other, epoch)
        if text(client.hget(other.keys.meta, "lease_sweep")) == "done":
            break
    assert_index_holds(client, other.keys)
    assert other.status().queued == 0
    die(old, epoch)
    answer = beat(other, epoch)
    # then its death finds them in the index, and they all come back once
    assert [(d.node, d.leases) for d in answer.declared_dead] == [("old", 600)]
    while client.exists(other.keys.reclaiming):
        beat(other, epoch)
    again = lease_all(other, epoch, 2000)
    assert sorted(e for e, _, _ in again) == sorted(held)
    assert_frontier_invariants(client, other.keys)


def test_leases_with_no_index_entry_still_come_back_when_they_expire(
    redis_server: RedisServer,
) -> None:
    # given 120 leases of a node, with no index entry and the sweep over (an older node wrote
    # them after it), whose deadline passes
    client = make_client(redis_server.url)
    old, epoch = joined(redis_server, "old")
    fill(old, epoch, 120)
    held = {e for e, _, _ in old.lease(epoch, 120, 50, new_call_id())}
    drop_index(client, old.keys, sweep=False)
    time.sleep(0.1)
    # when another node leases
    other, _ = joined(redis_server, "other")
    got = [e for _ in range(5) for e, _, _ in other.lease(epoch, 200, LONG_MS, new_call_id())]
    # then they came back, 50 per lease call, each once
    assert sorted(got) == sorted(held)
    assert reclaimed(other) == 120
    assert_frontier_invariants(client, other.keys)


def test_late_acks_of_the_node_thought_dead_neither_queue_twice_nor_hand_out_again(
    redis_server: RedisServer,
) -> None:
    # given a node holding 800 leases, declared dead, of which one beat returned 250
    client = make_client(redis_server.url)
    dying, epoch = joined(redis_server, "dying")
    fill(dying, epoch, 800)
    held = lease_all(dying, epoch, 800)
    die(dying, epoch)
    alive, _ = joined(redis_server, "alive")
    beat(alive, epoch)
    queued_again = {text(i) for i in client.hkeys(alive.keys.frontier_requeued)}
    assert len(queued_again) == PER_BEAT
    # when the node thought dead acks 100 that went back to the queue and 100 still leased
    back = [e for e, _, _ in held if e in queued_again][:100]
    still = [e for e, _, _ in held if e not in queued_again][:100]
    result = dying.flush(epoch, [Ack(e) for e in back + still], new_call_id())
    assert result.acked == 200
    assert_index_holds(client, alive.keys)
    # and the other node's heartbeats and leases return the rest, and it leases everything
    while client.exists(alive.keys.reclaiming):
        beat(alive, epoch)
        assert_frontier_invariants(client, alive.keys)
    got = lease_all(alive, epoch, 2000)
    # then it gets each of the 600 not acked once, and none of those acked
    assert sorted(e for e, _, _ in got) == sorted(
        {e for e, _, _ in held} - set(back) - set(still))
    alive.flush(epoch, [Ack(e) for e, _, _ in got], new_call_id())
    status = alive.status()
    assert (status.queued, status.leased, status.counters["acked"]) == (0, 0, 800)
    assert_frontier_invariants(client, alive.keys)
    assert client.exists(alive.keys.node_leases, alive.keys.reclaiming) == 0


def test_a_node_declared_dead_that_comes_back_keeps_its_new_leases(
    redis_server: RedisServer,
) -> None:
    # given a node declared dead with 600 leases, of which the declaring beat returned 250
    client = make_client(redis_server.url)
    dying, epoch = joined(redis_server, "dying")
    fill(dying, epoch, 1000)
    held = {e for e, _, _ in lease_all(dying, epoch, 600)}
    die(dying, epoch)
    alive, _ = joined(redis_server, "alive")
    beat(alive, epoch)
    # when it comes back and leases again before the rest of its old leases are back
    assert beat(dying, epoch).my_death is not None
    fresh = {e for e, _, _ in dying.lease(epoch, 100, LONG_MS, new_call_id())}
    while client.exists(alive.keys.reclaiming):
        beat(alive, epoch)
    # then its new leases stay its own, and all its old ones came back
    owners = {text(i): text(v).split("|", 1)[1].split("\n", 1)[0]
              for i, v in client.hgetall(alive.keys.leased).items()}
    assert owners == {e: "dying" for e in fresh}
    got = {e for e, _, _ in lease_all(alive, epoch, 2000)}
    assert len(got) + len(fresh) == 1000 and not got & fresh and held - fresh <= got
    assert_index_holds(client, alive.keys)
    assert_frontier_invariants(client, alive.keys)


def test_check_leaves_alone_the_leases_still_being_returned_and_reports_nothing(
    redis_server: RedisServer,
) -> None:
    # given a dead node's 600 leases, of which the declaring beat returned 250
    dying, epoch = joined(redis_server, "dying")
    fill(dying, epoch, 600)
    lease_all(dying, epoch, 600)
    die(dying, epoch)
    alive, _ = joined(redis_server, "alive")
    beat(alive, epoch)
    # when `clustersync check --repair` runs while the rest are still being returned
    found = JobCheck(alive).run(repair=True)
    # then it finds nothing, and the heartbeats return them all in order as before
    assert found == []
    while make_client(redis_server.url).exists(alive.keys.reclaiming):
        beat(alive, epoch)
    assert len(lease_all(alive, epoch, 2000)) == 600
    assert_frontier_invariants(make_client(redis_server.url), alive.keys)
