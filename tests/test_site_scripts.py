"""site_turns.lua and site_slow_down.lua on a real redis-server: one politeness budget per site
for the whole cluster (GCRA on the Redis clock), reserved in small batches, capped in flight
with leases, slowed down by 429/503."""

from __future__ import annotations

import json
import statistics
import threading
import time

from scrapy_clustersync.store import make_client
from scrapy_clustersync.store.control_state import (
    ControlState,
    ControlStore,
    heard_settings_version,
    heard_site_slowed,
)
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.site_scripts import SiteStore, Turns, TurnsAsk
from testkit.redis_server import RedisServer

from support import clustersync, joined

SITE = "a.example"


def sites(server: RedisServer, *nodes: str) -> list[SiteStore]:
    client = make_client(server.url)
    return [SiteStore(client, JobKeys("job"), node) for node in nodes]


def ask(count: int = 1, delay_s: float = 0.5, *, jitter: float = 0.0, horizon_s: float = 0.2,
        cap: int = 0, lease_s: float = 60.0, good: int = 0, done: tuple[str, ...] = (),
        seed: int = 1) -> TurnsAsk:
    return TurnsAsk(SITE, count, delay_s, jitter, seed, horizon_s, cap, lease_s, good, done)


def starts_ms(turns: Turns) -> list[float]:
    """The turns' starts on the Redis clock."""
    return [turns.server_ms + offset * 1000 for offset in turns.offsets_s]


def test_two_nodes_asking_in_turn_get_turns_one_delay_apart(redis_server: RedisServer) -> None:
    # given two nodes sharing a site with a 0.5 s delay
    one, two = sites(redis_server, "n1", "n2")
    # when they ask for a turn each, three times, alternately
    starts = [s for _ in range(3) for node in (one, two) for s in starts_ms(node.turns(ask()))]
    # then the six turns are 0.5 s apart on the Redis clock, the first one now
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(abs(gap - 500) < 5 for gap in gaps), gaps


def test_a_call_reserves_the_short_turns_within_the_horizon_and_always_one(
        redis_server: RedisServer) -> None:
    (node,) = sites(redis_server, "n1")
    # a 10 ms delay and a 50 ms horizon: the turns at 0, 10, ... 50 ms
    short = node.turns(ask(count=100, delay_s=0.01, horizon_s=0.05))
    assert len(short.offsets_s) == 6
    # a long delay: one turn, however many are wanted, and it waits for the ones reserved
    # (on the Redis clock: the second call comes a few ms after the first on a busy machine)
    far = node.turns(ask(count=100, delay_s=2.0, horizon_s=0.05))
    assert len(far.offsets_s) == 1
    assert 55 < starts_ms(far)[0] - starts_ms(short)[0] < 70


def test_randomized_delays_stay_in_half_to_one_and_a_half_and_never_bunch_up(
        redis_server: RedisServer) -> None:
    (node,) = sites(redis_server, "n1")
    turns = node.turns(ask(count=400, delay_s=0.01, jitter=0.5, horizon_s=10.0))
    gaps = [b - a for a, b in zip(turns.offsets_s, turns.offsets_s[1:], strict=False)]
    assert len(gaps) == 399
    assert min(gaps) >= 0.005 - 1e-6 and max(gaps) <= 0.015 + 1e-6
    assert 0.0095 < statistics.mean(gaps) < 0.0105 and statistics.pstdev(gaps) > 0.0015
    # and any run of turns in a row spans its delays within one jitter (0.5 x the delay): no
    # window holds more turns than the delay allows, as independent draws would by chance
    starts = turns.offsets_s
    for run in (10, 50, 200):
        spans = [starts[i + run] - starts[i] for i in range(len(starts) - run)]
        assert all(abs(span - run * 0.01) <= 0.005 + 1e-6 for span in spans), run


def test_the_cap_counts_turns_under_way_for_every_node_until_they_are_done(
        redis_server: RedisServer) -> None:
    # given a site capped at 2 requests under way for the cluster, without a delay
    one, two = sites(redis_server, "n1", "n2")
    first = one.turns(ask(count=5, delay_s=0.0, cap=2, lease_s=30.0))
    assert len(first.tokens) == 2 and all(first.tokens) and first.retry_s is None
    # when the other node asks: nothing, and when to look again (the first lease's end)
    full = two.turns(ask(count=5, delay_s=0.0, cap=2, lease_s=30.0))
    assert full.tokens == () and full.retry_s == 0.1
    # when the first node's turn ends, the node that waited gets the slot, not the first again
    again = one.turns(ask(count=5, delay_s=0.0, cap=2, done=first.tokens[:1]))
    assert again.tokens == () and again.retry_s == 0.1
    freed = two.turns(ask(count=5, delay_s=0.0, cap=2, lease_s=30.0))
    assert len(freed.tokens) == 1


def test_a_slot_whose_lease_ended_is_free_again(redis_server: RedisServer) -> None:
    # a node that never says its turn ended (killed) holds its slot only as long as the lease
    one, two = sites(redis_server, "n1", "n2")
    assert len(one.turns(ask(delay_s=0.0, cap=1, lease_s=0.2)).tokens) == 1
    blocked = two.turns(ask(delay_s=0.0, cap=1, lease_s=0.2))
    assert blocked.tokens == () and blocked.retry_s is not None
    time.sleep(0.21)  # the 0.2 s lease ends on the Redis clock: there is nothing to wait on
    assert len(two.turns(ask(delay_s=0.0, cap=1)).tokens) == 1


def test_a_retry_after_blocks_the_site_for_every_node_until_then(
        redis_server: RedisServer) -> None:
    one, two = sites(redis_server, "n1", "n2")
    one.turns(ask(delay_s=0.1))
    slowed = one.slow_down(SITE, 3.0, 0.1)
    assert 2.99 <= slowed.blocked_s <= 3.0
    later = two.turns(ask(delay_s=0.1))
    # the other node's first turn is not before the block ends (both figures from one call: a
    # busy machine's pause between the two calls shortens both alike)
    assert later.blocked_s - 0.001 <= later.offsets_s[0] <= 3.0
    # and the answer says how long the block still holds (the nodes' records show it)
    assert 2.9 <= later.blocked_s <= 3.0


def test_a_slow_down_is_published_to_every_node_on_the_control_channel_at_once(
        redis_server: RedisServer) -> None:
    # given a node listening on the job's control channel as every node's Redis thread does
    control = ControlStore(make_client(redis_server.url), JobKeys("job"))
    heard = threading.Event()
    subscription = control.subscribe(heard.set)
    try:
        (node,) = sites(redis_server, "n1")
        # when another node reports a 429 with Retry-After: 3, then a 503 without
        node.slow_down(SITE, 3.0, 0.1)
        node.slow_down(SITE, None, 0.1)
        # then both are heard at once, naming the site, and neither is a control state
        assert heard.wait(1.0)
        messages = [subscription.wait(1.0), subscription.wait(1.0)]
    finally:
        subscription.close()
    assert [heard_site_slowed(m or "") for m in messages] == [SITE, SITE]
    assert all(ControlState.heard(m or "") is None for m in messages)
    assert all(heard_settings_version(m or "") is None for m in messages)
    blocked_ms, backoff_ms = (float(part) for part in (messages[1] or "").split()[1:3])
    assert blocked_ms > 0 and backoff_ms == 250


def test_a_503_without_retry_after_doubles_the_backoff_and_good_responses_shrink_it(
        redis_server: RedisServer) -> None:
    (node,) = sites(redis_server, "n1")
    backoffs = [node.slow_down(SITE, None, 0.1).backoff_s for _ in range(4)]
    assert backoffs == [0.25, 0.5, 1.0, 2.0]
    assert node.turns(ask(delay_s=0.1)).step_s == 2.0
    assert abs(node.turns(ask(delay_s=0.1, good=10)).step_s - 2.0 * 0.9 ** 10) < 1e-6
    assert node.turns(ask(delay_s=0.1, good=100)).step_s == 0.1


def test_the_site_keys_expire_and_the_sites_index_names_the_site(
        redis_server: RedisServer) -> None:
    (node,) = sites(redis_server, "n1")
    node.turns(ask(cap=1))
    client, keys = make_client(redis_server.url), JobKeys("job")
    assert client.pttl(keys.site(SITE)) > 0 and client.pttl(keys.site_inflight(SITE)) > 0
    assert client.zrange(keys.sites, 0, -1) == [SITE.encode()]


def test_status_sites_shows_each_sites_budget_bounded_and_purge_deletes_them(
        redis_server: RedisServer) -> None:
    # given a job whose node reserved turns of three sites, one capped, one slowed down
    store, _ = joined(redis_server)
    for name in ("a.com", "b.com", "c.com"):
        store.sites.turns(TurnsAsk(name, 2, 0.5, 0.0, 1, 1.0, 2 if name == "b.com" else 0, 60.0))
    store.sites.slow_down("c.com", 30.0, 0.5)
    # when `status --sites 2 --json` is asked
    answer = clustersync(redis_server.url, "status", "job", "--sites", "2", "--json")
    # then it shows the two sites used last of three, with their delay, cap use and block
    assert answer.returncode == 0, answer.stderr
    sites = json.loads(answer.stdout)["sites"]
    assert sites["total"] == 3 and [s["site"] for s in sites["shown"]] == ["c.com", "b.com"]
    c, b = sites["shown"]
    assert 29.0 < c["blocked_s"] <= 30.0 and c["next_turn_s"] >= c["blocked_s"]
    assert b["in_flight"] == 2 and b["delay_s"] == 0.5 and 0.5 < b["next_turn_s"] <= 1.0
    # and the text form is a table of them
    text = clustersync(redis_server.url, "status", "job", "--sites")
    assert text.returncode == 0 and "sites: 3 of 3" in text.stdout and "a.com" in text.stdout
    # and purge deletes every site key with the job
    assert clustersync(redis_server.url, "purge", "job", "--yes").returncode == 0
    client = make_client(redis_server.url)
    assert client.keys("*site*") == [] and client.keys("*inflight*") == []
