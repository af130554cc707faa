"""ClusterTurns on the reactor's side, with a fake Redis thread: turns answered from what was
reserved, one ask at a time per site, nothing asked without a delay or cap, dropped on a
settings change, slowed down by 429/503; Retry-After read as seconds or a date; the politeness
mode checked at start."""

from __future__ import annotations

import math
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

import pytest
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig, ConfigError
from scrapy_clustersync.node.thread_api import ReservedTurns
from scrapy_clustersync.plugin.cluster_turns import ClusterTurns
from scrapy_clustersync.plugin.retry_after import retry_after_s
from scrapy_clustersync.plugin.site_turns import LocalTurns, site_turns_for
from scrapy_clustersync.store.lease_script import LeasePace
from scrapy_clustersync.store.site_scripts import TurnsAsk


class FakeLink:
    def __init__(self) -> None:
        self.asks: list[TurnsAsk] = []
        self.slowed: list[tuple[str, float | None, float]] = []
        self.listener: Callable[[str, ReservedTurns], None] | None = None
        self.slowed_listener: Callable[[str], None] | None = None
        self.paces: list[LeasePace] = []

    def want_turns(self, ask: TurnsAsk) -> None:
        self.asks.append(ask)

    def slow_down(self, site: str, retry_after_s: float | None, delay_s: float) -> None:
        self.slowed.append((site, retry_after_s, delay_s))

    def listen_turns(self, callback: Callable[[str, ReservedTurns], None]) -> None:
        self.listener = callback

    def listen_slowed(self, callback: Callable[[str], None]) -> None:
        self.slowed_listener = callback

    def set_pace(self, pace: LeasePace) -> None:
        self.paces.append(pace)


#: the gate's clock, as ClusterTurns reads it when turns come (the tests set it)
CLOCK = [0.0]


def turns_on(delay: float = 0.5, per_domain: int = 0) -> tuple[ClusterTurns, FakeLink, list[int]]:
    later: list[tuple[float, Callable[[], None]]] = []
    CLOCK[0] = 0.0
    turns = ClusterTurns(download_delay=delay, randomize=False, site_delays={"slow.com": 3.0},
                         per_domain=per_domain, lease_s=60.0,
                         later=lambda s, call: later.append((s, call)), clock=lambda: CLOCK[0])
    link, woken = FakeLink(), [0]
    turns.bind(link, lambda: woken.__setitem__(0, woken[0] + 1), lambda key: 3)
    return turns, link, woken


def test_the_leases_are_told_the_pace_when_bound_and_when_the_settings_change_live() -> None:
    # given cluster turns bound to the node's Redis thread
    turns, link, _ = turns_on(delay=0.5, per_domain=2)
    # then its leases serve each site at the cluster's pace: the delays and the cap
    assert link.paces == [LeasePace(on=True, delay_s=0.5, site_delays={"slow.com": 3.0},
                                    per_domain=2)]
    # when the shared settings change the delays live
    turns.configure(download_delay=0.0, randomize=False, site_delays={}, per_domain=2)
    # then the leases follow at once: no delay left, the cap kept
    assert link.paces[-1] == LeasePace(on=True, delay_s=0.0, site_delays={}, per_domain=2)


def test_a_site_without_delay_or_cap_costs_no_redis_call() -> None:
    turns, link, _ = turns_on(delay=0.0)
    assert turns.wait_s("a.com", None, 10.0) == 0.0
    assert link.asks == []


def test_no_turn_left_asks_once_and_the_reserved_turns_answer_and_wake_the_gate() -> None:
    turns, link, woken = turns_on()
    assert turns.wait_s("a.com", None, 10.0) == math.inf
    assert turns.wait_s("a.com", None, 10.0) == math.inf
    assert [(a.site, a.count, a.delay_s) for a in link.asks] == [("a.com", 3, 0.5)]
    assert link.listener is not None
    link.listener("a.com", ReservedTurns((10.2, 10.7), ("", "")))
    assert woken == [1]
    assert turns.wait_s("a.com", None, 10.0) == pytest.approx(0.2)
    turns.taken("a.com", 10.2)
    assert turns.wait_s("a.com", None, 10.2) == pytest.approx(0.5)


def test_a_site_delay_overrides_download_delay_and_stale_turns_are_dropped() -> None:
    turns, link, _ = turns_on()
    turns.wait_s("slow.com", None, 0.0)
    assert link.asks[0].delay_s == 3.0
    assert link.listener is not None
    link.listener("slow.com", ReservedTurns((1.0,), ("",)))
    assert turns.wait_s("slow.com", None, 5.0) == math.inf  # 1.0 + 3.0 < 5.0: dropped
    assert len(link.asks) == 2


def test_a_turn_that_comes_after_its_start_is_late_from_when_it_came() -> None:
    # given a node far from Redis: its turns come half a round trip after their start
    turns, link, _ = turns_on(delay=0.0, per_domain=4)
    turns.wait_s("a.com", None, 100.0)
    assert link.listener is not None
    CLOCK[0] = 100.0
    link.listener("a.com", ReservedTurns((99.9,), ("n:1",)))
    # when the gate looks at it 0.1 s after its start (twice the least lateness)
    wait = turns.wait_s("a.com", None, 100.0)
    # then it is used, not dropped and asked for again (which would never end)
    assert wait <= 0 and len(link.asks) == 1
    turns.taken("a.com", 100.0)
    assert turns._inflight["a.com"] == ["n:1"]


def test_turns_not_looked_at_until_long_after_they_came_are_dropped_not_sent_at_once() -> None:
    # given turns 0.1 s apart reserved ahead, that came at 10.0, and no request of the site
    turns, link, _ = turns_on(delay=0.1)
    turns.wait_s("a.com", None, 10.0)
    assert link.listener is not None
    CLOCK[0] = 10.0
    link.listener("a.com", ReservedTurns((10.0, 10.1, 10.2), ("", "", "")))
    # when requests of the site come only at 11.0
    wait = turns.wait_s("a.com", None, 11.0)
    # then none of those turns is used (three requests at once would reach the site): it asks
    assert wait == math.inf and len(link.asks) == 2


def test_a_settings_change_drops_the_turns_reserved_and_frees_their_slots() -> None:
    turns, link, _ = turns_on(per_domain=2)
    turns.wait_s("a.com", None, 0.0)
    assert link.listener is not None
    link.listener("a.com", ReservedTurns((1.0, 1.5), ("n:1", "n:2")))
    turns.configure(download_delay=0.1, randomize=True, site_delays={}, per_domain=2)
    assert turns.wait_s("a.com", None, 0.0) == math.inf
    assert link.asks[-1].delay_s == 0.1 and link.asks[-1].jitter == 0.5
    assert set(link.asks[-1].done) == {"n:1", "n:2"}


def test_a_turn_under_way_frees_its_slot_when_its_request_ends() -> None:
    turns, link, _ = turns_on(delay=0.0, per_domain=1)
    turns.wait_s("a.com", None, 0.0)
    assert link.listener is not None
    link.listener("a.com", ReservedTurns((0.0,), ("n:1",)))
    turns.taken("a.com", 0.0)
    turns.done("a.com")
    turns.wait_s("a.com", None, 0.1)
    assert link.asks[-1].done == ("n:1",)


def test_a_429_with_retry_after_blocks_the_site_and_a_503_without_backs_it_off() -> None:
    turns, link, _ = turns_on(delay=0.0)
    turns.answered("a.com", 429, {b"Retry-After": b"3"})
    turns.answered("b.com", 503, {})
    assert link.slowed == [("a.com", 3.0, 0.0), ("b.com", None, 0.0)]
    # a slowed site is asked for even without a delay, its good responses counted
    assert turns.wait_s("b.com", None, 0.0) == math.inf
    turns.answered("b.com", 200, {})
    assert link.listener is not None
    link.listener("b.com", ReservedTurns((0.0,), ("",), 0.25, 0.25))
    turns.wait_s("b.com", None, 1.0)
    assert link.asks[-1].good == 1


def test_a_slow_down_heard_drops_the_turns_reserved_and_an_answer_asked_before() -> None:
    # given a node holding two turns of a site, and an ask of another site under way
    turns, link, woken = turns_on(per_domain=2)
    turns.wait_s("a.com", None, 0.0)
    turns.wait_s("b.com", None, 0.0)
    assert link.listener is not None and link.slowed_listener is not None
    link.listener("a.com", ReservedTurns((0.5, 1.0), ("n:1", "n:2")))
    # when another node's 429 of each is heard
    link.slowed_listener("a.com")
    link.slowed_listener("b.com")
    # then no turn reserved before is used: the gate is woken, asks again, frees their slots
    assert woken[0] >= 2
    assert turns.wait_s("a.com", None, 0.5) == math.inf
    assert set(link.asks[-1].done) == {"n:1", "n:2"}
    # and the answer to the ask made before the slow-down is not used either
    link.listener("b.com", ReservedTurns((0.5,), ("n:3",)))
    assert turns.wait_s("b.com", None, 0.5) == math.inf
    assert link.asks[-1].site == "b.com" and link.asks[-1].done == ("n:3",)


def test_the_node_that_got_the_429_drops_its_turns_before_telling_redis() -> None:
    turns, link, _ = turns_on()
    turns.wait_s("a.com", None, 0.0)
    assert link.listener is not None
    link.listener("a.com", ReservedTurns((0.1, 0.6), ("", "")))
    turns.answered("a.com", 429, {b"Retry-After": b"3"})
    assert turns.wait_s("a.com", None, 0.1) == math.inf


@pytest.mark.parametrize(("value", "seconds"), [
    (b"3", 3.0), ("120", 120.0), (None, None), (b"soon", None), (b"", None),
    (formatdate(1000.0 + 30, usegmt=True), 30.0), (b"99999999", 3600.0)])
def test_retry_after_is_read_as_seconds_or_an_http_date(value: Any, seconds: float | None
                                                        ) -> None:
    assert retry_after_s(value, now=1000.0) == seconds


def test_the_politeness_mode_picks_the_turns_and_a_bad_one_stops_the_node() -> None:
    assert isinstance(site_turns_for(Settings()), ClusterTurns)
    assert isinstance(site_turns_for(Settings({"CLUSTERSYNC_POLITENESS": "node"})), LocalTurns)
    with pytest.raises(ConfigError, match="CLUSTERSYNC_POLITENESS = 'nodes'.*'cluster'.*'node'"):
        ClusterConfig.from_settings(Settings({"CLUSTERSYNC_POLITENESS": "nodes",
                                              "CLUSTERSYNC_REDIS_URL": "redis://h:1/0"}), "s")


def test_the_projects_per_domain_setting_caps_the_cluster_and_scrapys_default_does_not() -> None:
    assert ClusterTurns.from_settings(Settings()).per_domain == 0
    settings = Settings()
    settings.set("CONCURRENT_REQUESTS_PER_DOMAIN", 2, priority="project")
    assert ClusterTurns.from_settings(settings).per_domain == 2


def test_a_live_change_to_scrapys_default_per_domain_leaves_the_cluster_uncapped() -> None:
    turns = ClusterTurns.from_settings(Settings())
    turns.configure(download_delay=1.0, randomize=True, site_delays={}, per_domain=8)
    assert turns.per_domain == 0
    turns.configure(download_delay=1.0, randomize=True, site_delays={}, per_domain=3)
    assert turns.per_domain == 3


def test_turns_that_came_after_their_start_never_go_to_the_site_at_once() -> None:
    # given turns 0.1 s apart that came when all three had started (a far node, a busy reactor)
    turns, link, _ = turns_on(delay=0.1)
    turns.wait_s("a.com", None, 10.0)
    assert link.listener is not None
    CLOCK[0] = 10.25
    link.listener("a.com", ReservedTurns((10.0, 10.1, 10.2, 10.3, 10.4), ("",) * 5))
    # when requests of the site wait at the gate then
    starts = []
    for now in (10.25, 10.25, 10.25, 10.3, 10.4):
        if turns.wait_s("a.com", None, now) <= 0:
            turns.taken("a.com", now)
            starts.append(now)
    # then the site sees one of them at 10.25 (the turns started before the last started are
    # dropped), then one per turn
    assert starts == [10.25, 10.3, 10.4]


def test_turns_of_a_cap_without_delay_that_came_late_all_go() -> None:
    # given a site capped at 3 in flight, no delay, whose three turns came 0.04 s after their start
    turns, link, _ = turns_on(delay=0.0, per_domain=3)
    turns.wait_s("a.com", None, 10.0)
    assert link.listener is not None
    CLOCK[0] = 10.04
    link.listener("a.com", ReservedTurns((10.0, 10.0, 10.0), ("n:1", "n:2", "n:3")))
    # when three requests of the site wait at the gate
    used = 0
    for _ in range(3):
        if turns.wait_s("a.com", None, 10.04) <= 0:
            turns.taken("a.com", 10.04)
            used += 1
    # then all three go, as the cap allows
    assert used == 3
