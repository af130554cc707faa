"""The frontier against a real redis-server: a queue per site, leased fairly and at each site's
pace, priorities across ready sites, leases that end, and jobs queued by an earlier version."""

from __future__ import annotations

import json
from collections import Counter
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.store import Ack, JobStore, Push, PushFlags, Release, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.lease_script import LeasePace
from scrapy_clustersync.store.records import LeaseValue
from testkit.redis_server import RedisServer

from support import clustersync

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()


def push(url: str, priority: int = 0) -> Push:
    request = Request(url, priority=priority)
    return Push(FINGERPRINTER.fingerprint(request), priority, CODEC.encode(request), 0,
                urlsplit(url).hostname or "")


def joined(redis_server: RedisServer, node: str = "n1") -> tuple[JobStore, str]:
    store = JobStore(make_client(redis_server.url), "job", node)
    epoch, _ = store.join(ttl_ms=10_000)
    return store, epoch


def leased(store: JobStore, epoch: str, count: int,
           horizon_ms: int = 1000) -> list[tuple[str, str]]:
    """(entry id, URL) of what one lease hands out."""
    return [(entry_id, CODEC.decode(blob).url) for entry_id, blob, _ in
            store.lease(epoch, count, 60_000, new_call_id(), horizon_ms)]


def hosts(urls: list[str]) -> list[str]:
    return [urlsplit(url).hostname or "" for url in urls]


def test_a_higher_priority_goes_first_and_the_ready_sites_take_turns(
    redis_server: RedisServer,
) -> None:
    # given three sites with requests of priority 0, and one site with two of priority 5
    store, epoch = joined(redis_server)
    ops = [push(f"http://{site}.test/{n}") for n in range(3) for site in ("a", "b", "c")]
    ops += [push("http://d.test/high1", 5), push("http://d.test/high2", 5)]
    store.flush(epoch, ops, new_call_id())
    # when a node leases them three at a time
    batches = [[url for _, url in leased(store, epoch, 3)] for _ in range(4)]
    # then the higher priority comes first, then the sites of priority 0 take turns, one
    # request each per lease of three, each site's requests in the order they were pushed
    urls = [url for batch in batches for url in batch]
    assert urls[:2] == ["http://d.test/high1", "http://d.test/high2"]
    assert hosts(urls[2:]) == ["a.test", "b.test", "c.test"] * 3
    for site in ("a", "b", "c"):
        assert [u for u in urls if site + ".test" in u] == [f"http://{site}.test/{n}"
                                                           for n in range(3)]


def test_one_deep_site_does_not_fill_a_lease_while_other_sites_have_work(
    redis_server: RedisServer,
) -> None:
    # given a site with 300 requests and ten sites with 3 each, all without a delay
    store, epoch = joined(redis_server)
    ops = [push(f"http://deep.test/{n}") for n in range(300)]
    ops += [push(f"http://s{site}.test/{n}") for site in range(10) for n in range(3)]
    store.flush(epoch, ops, new_call_id())
    # when a node leases 33
    urls = [url for _, url in leased(store, epoch, 33)]
    # then every site got its share: the deep site no more than the others
    counts = Counter(hosts(urls))
    assert len(urls) == 33 and len(counts) == 11
    assert max(counts.values()) == 3


def test_a_throttled_site_is_handed_out_no_faster_than_its_delay(
    redis_server: RedisServer,
) -> None:
    # given a slow site (0.5 s between requests for the cluster) and a fast one, 100 requests
    # each, and two nodes whose leases follow the cluster's pace
    store, epoch = joined(redis_server, "n1")
    other, other_epoch = joined(redis_server, "n2")
    pace = LeasePace(on=True, delay_s=0.0, site_delays={"slow.test": 0.5})
    store.set_lease_pace(pace)
    other.set_lease_pace(pace)
    ops = [push(f"http://{site}.test/{n}") for n in range(100) for site in ("slow", "fast")]
    store.flush(epoch, ops, new_call_id())
    # when both lease 60, meant to last a second, one after the other, and the first again
    first = Counter(hosts([url for _, url in leased(store, epoch, 60, horizon_ms=1000)]))
    second = Counter(hosts([url for _, url in leased(other, other_epoch, 60, horizon_ms=1000)]))
    third = store.lease(epoch, 60, 60_000, new_call_id(), 1000)
    # then the slow site was handed out only as far as it may start within that second (at
    # once, then every 0.5 s: three), and one more for the other live node (every node has one
    # to wait for at the gate); the rest of each lease is the fast site's; the third lease gets
    # nothing, and is told when the slow site may have one handed out again
    assert first == {"slow.test": 3, "fast.test": 57}
    assert second == {"slow.test": 1, "fast.test": 43}
    assert list(third) == [] and third.retry_s is not None and 0.4 < third.retry_s <= 0.5


def test_a_released_lease_comes_back_first_and_a_late_ack_of_a_returned_one_drops_it(
    redis_server: RedisServer,
) -> None:
    # given a node that leased two requests of a site with four queued
    store, epoch = joined(redis_server)
    store.flush(epoch, [push(f"http://a.test/{n}") for n in range(4)], new_call_id())
    (first_id, first_url), (second_id, _) = leased(store, epoch, 2)
    # when it releases the first, and acks the second after its lease was returned by another
    # way (it ran out: here, released as well, then acked late)
    store.flush(epoch, [Release(first_id), Release(second_id)], new_call_id())
    store.flush(epoch, [Ack(second_id)], new_call_id())
    # then the released one is leased first again, the acked one never, and nothing else is lost
    urls = [url for _, url in leased(store, epoch, 10)]
    assert urls == [first_url, "http://a.test/2", "http://a.test/3"]
    assert store.status().queued == 0


def test_a_job_queued_by_the_previous_version_is_leased_to_the_end(
    redis_server: RedisServer,
) -> None:
    # given a job whose queue an earlier version wrote: ids in a sorted set, requests in a hash
    store, epoch = joined(redis_server)
    client, keys = make_client(redis_server.url), store.keys
    for n in range(5):
        entry_id = f"0{n:016x}cafe0000"
        client.hset(keys.entries, entry_id, CODEC.encode(Request(f"http://old.test/{n}")))
        client.zadd(keys.queue, {entry_id: 0})
    # and a node of this version that pushes new requests
    store.flush(epoch, [push("http://new.test/0")], new_call_id())
    assert store.status().queued == 6
    # when it leases, acks everything, and leases again
    first = leased(store, epoch, 4)
    store.flush(epoch, [Ack(entry_id) for entry_id, _ in first], new_call_id())
    rest = leased(store, epoch, 10)
    store.flush(epoch, [Ack(entry_id) for entry_id, _ in rest], new_call_id())
    # then the old queue was served first, every request once, and nothing is left
    urls = [url for _, url in first + rest]
    assert urls == [f"http://old.test/{n}" for n in range(5)] + ["http://new.test/0"]
    status = store.status()
    assert (status.queued, status.leased) == (0, 0)


def test_a_lease_value_names_where_the_entry_goes_back(redis_server: RedisServer) -> None:
    # given a request leased from the frontier
    store, epoch = joined(redis_server)
    store.flush(epoch, [push("http://a.test/x", 3)], new_call_id())
    [(entry_id, _)] = leased(store, epoch, 1)
    # then its lease value says its score, its node, and its kind and site
    raw = make_client(redis_server.url).hget(store.keys.leased, entry_id)
    assert raw is not None and LeaseValue.parse(raw) == LeaseValue(-3.0, "n1", "0a.test")


def test_status_sites_shows_the_deepest_sites_ready_or_waiting_and_purge_deletes_the_queue(
    redis_server: RedisServer,
) -> None:
    # given a job with 5 requests of a slow site (one leased, so it waits for its next start
    # and rests once a lease passed it over) and 4 of a fast one (two leased)
    store, epoch = joined(redis_server)
    store.set_lease_pace(LeasePace(on=True, site_delays={"slow.test": 30.0}))
    store.flush(epoch, [push(f"http://slow.test/{n}") for n in range(5)]
                + [push(f"http://fast.test/{n}") for n in range(4)], new_call_id())
    leased(store, epoch, 1)
    leased(store, epoch, 2)
    # when `status --sites --json` is asked
    answer = clustersync(redis_server.url, "status", "job", "--sites", "--json")
    # then the queue says what it holds, deepest site first, the slow one waiting
    assert answer.returncode == 0, answer.stderr
    queue = json.loads(answer.stdout)["sites"]["queue"]
    assert (queue["queued"], queue["sites"]) == (6, 2) and queue["bytes"] > 6 * 20
    assert (queue["ready"], queue["resting"]) == (1, 1)
    slow, fast = queue["deepest"]
    assert (slow["site"], slow["queued"], fast["site"], fast["queued"]) == (
        "slow.test", 4, "fast.test", 2)
    assert 29 < slow["wait_s"] <= 30 and fast["wait_s"] == 0
    text = clustersync(redis_server.url, "status", "job", "--sites")
    assert "queue: 6 requests over 2 sites" in text.stdout and "slow.test" in text.stdout
    # and purge leaves nothing of the job
    assert clustersync(redis_server.url, "purge", "job", "--yes").returncode == 0
    assert make_client(redis_server.url).keys("clustersync:{job}:*") == []


def test_batches_larger_than_one_command_takes_keep_their_order_and_lose_nothing(
    redis_server: RedisServer,
) -> None:
    # given 2,500 requests of one site pushed in one flush (more than one command's worth of
    # values for one list)
    store, epoch = joined(redis_server)
    urls = [f"http://a.test/{n}" for n in range(2500)]
    store.flush(epoch, [push(url) for url in urls], new_call_id())
    # when a node leases them in one call, then acks them in one flush
    got = leased(store, epoch, 2500)
    result = store.flush(epoch, [Ack(entry_id) for entry_id, _ in got], new_call_id())
    # then they came in the order pushed, every one was acked, and nothing is left
    assert [url for _, url in got] == urls
    assert result.acked == 2500
    status = store.status()
    assert (status.queued, status.leased) == (0, 0)


def test_a_dead_node_with_many_leases_gets_them_all_back_a_bounded_part_per_call(
    redis_server: RedisServer,
) -> None:
    # given a node holding 1,500 leases whose heartbeats stopped (its liveness ran out)
    dead, epoch = joined(redis_server, "n1")
    dead.flush(epoch, [push(f"http://s{n % 7}.test/{n}") for n in range(1500)], new_call_id())
    held = dead.lease(epoch, 1500, 600_000, new_call_id())
    assert len(held) == 1500
    dead.heartbeat(epoch, ttl_ms=1, lease_ms=600_000, info={}, idle=False, idle_after_ms=0,
                   lease_ids=[])
    alive, _ = joined(redis_server, "n2")
    # when a live node's heartbeat declares it dead
    beat = alive.heartbeat(epoch, ttl_ms=60_000, lease_ms=600_000, info={}, idle=False,
                           idle_after_ms=0, lease_ids=[])
    # then it is declared dead with all its leases, of which one beat returned 250 itself and
    # the next lease calls return the rest, 50 each: every request comes back once
    assert [(d.node, d.leases) for d in beat.declared_dead] == [("n1", 1500)]
    assert alive.status().queued == 250
    again: list[str] = []
    for _ in range(60):
        got = alive.lease(epoch, 200, 600_000, new_call_id())
        if not got:
            break
        again.extend(entry_id for entry_id, _, _ in got)
    assert sorted(again) == sorted(entry.entry_id for entry in held)
    status = alive.status()
    assert (status.queued, status.counters["reclaimed"]) == (0, 1500)


def test_an_entry_id_says_whether_it_is_a_start_request(redis_server: RedisServer) -> None:
    # given a start request and another request of the same priority, pushed in that order
    # (the node's prefetch reads the kind from the id: node/prefetch.py served_before)
    store, epoch = joined(redis_server)
    start = push("http://a.test/start")
    start = Push(start.fingerprint, 0, start.request, int(PushFlags.START), start.site)
    store.flush(epoch, [start] + [push(f"http://a.test/{n}") for n in range(20)], new_call_id())
    # when they are leased
    got = leased(store, epoch, 21)
    # then the other requests come first, and each id starts with its kind
    assert got[-1][1] == "http://a.test/start" and got[-1][0].startswith("1")
    assert all(entry_id.startswith("0") for entry_id, _ in got[:-1])
