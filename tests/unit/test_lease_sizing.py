"""A sized lease is what the node can start before the next lease, less what its engine already
holds and has not started (node/lease_sizing.py)."""

from __future__ import annotations

import time
from typing import cast

from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.lease_sizing import (
    REFRESH_S,
    TARGET_SLACK,
    Downstream,
    LeaseSizer,
)
from scrapy_clustersync.node.reactor_link import Channel, Inbox, NodeLink
from scrapy_clustersync.node.thread_messages import Demand
from scrapy_clustersync.store import Leased

#: one site, one request at a time and a delay: one slot that runs one, plus one new site
POLITE_CAPACITY = 2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sizer_seeing(downstream: list[Downstream], clock: Clock) -> LeaseSizer:
    """A sized lease whose downloader shows ``downstream[0]`` (changed by the test)."""
    return LeaseSizer(maximum=128, initial=1, measure=lambda: downstream[0], clock=clock)


def test_a_polite_node_whose_engine_holds_what_it_can_start_leases_nothing_more() -> None:
    # given a polite node whose engine took four requests it has not started (held at the
    # download gate for their turns), more than it can start before its next lease
    clock = Clock()
    sizer = sizer_seeing([Downstream(not_started=4, room=1, capacity=POLITE_CAPACITY)], clock)
    # when its lease is sized
    sizer.refresh(round_trip_s=0.001)
    # then it wants nothing leased: the rest of the queue is the other nodes'
    assert sizer.target == 0


def test_entries_the_engine_takes_between_two_looks_at_the_downloader_count_at_once() -> None:
    # given a polite node with nothing waiting, which can start two requests before its next
    # lease
    clock = Clock()
    sizer = sizer_seeing([Downstream(not_started=0, room=2, capacity=POLITE_CAPACITY)], clock)
    sizer.refresh(round_trip_s=0.001)
    assert sizer.target == 2
    # when its engine takes two entries within one look at the downloader (Redis near: the
    # thread leases again after each take, long before the next look)
    sizer.refresh(round_trip_s=0.001, handing_out=True)
    sizer.refresh(round_trip_s=0.001, handing_out=True)
    # then it wants nothing more leased meanwhile
    assert sizer.target == 0


def test_a_node_wants_a_lease_again_once_its_engine_started_what_it_held() -> None:
    # given a polite node that wanted nothing while its engine held four requests
    clock = Clock()
    downstream = [Downstream(not_started=4, room=1, capacity=POLITE_CAPACITY)]
    sizer = sizer_seeing(downstream, clock)
    sizer.refresh(round_trip_s=0.001)
    assert sizer.target == 0
    # when it started them, half a second apart (two a second)
    for _ in range(4):
        clock.now += 0.5
        sizer.refresh(round_trip_s=0.001, starting=True)
    downstream[0] = Downstream(not_started=0, room=1, capacity=POLITE_CAPACITY)
    clock.now += REFRESH_S
    # then it wants what it can start before its next lease again
    assert sizer.refresh(round_trip_s=0.001)
    assert sizer.target >= POLITE_CAPACITY


def test_a_node_whose_held_requests_ended_unstarted_wants_a_lease_at_once() -> None:
    # given a polite node that wanted nothing while its engine held four requests
    clock = Clock()
    downstream = [Downstream(not_started=4, room=1, capacity=POLITE_CAPACITY)]
    sizer = sizer_seeing(downstream, clock)
    sizer.refresh(round_trip_s=0.001)
    assert sizer.target == 0
    # when they ended without going on to the downloader (a middleware dropped them), before
    # the next look would be due
    downstream[0] = Downstream(not_started=0, room=1, capacity=POLITE_CAPACITY)
    # then the engine's next call sizes the lease from the downloader, not from the count
    assert sizer.refresh(round_trip_s=0.001)
    assert sizer.target == POLITE_CAPACITY


def test_a_fast_node_with_nothing_waiting_leases_at_least_what_its_downloader_runs_at_once(
) -> None:
    # given a node without delays whose downloader runs 16 requests at once, all free
    clock = Clock()
    downstream = [Downstream(not_started=0, room=16, capacity=16)]
    sizer = sizer_seeing(downstream, clock)
    # when its lease is sized before any request started
    sizer.refresh(round_trip_s=0.001)
    # then it leases enough to fill its downloader
    assert sizer.target == 16
    # and once it starts 100 requests a second, also what it starts over the lease's horizon
    # (half a second with Redis near)
    for _ in range(4):
        clock.now += 0.25
        for _ in range(25):
            sizer.refresh(round_trip_s=0.001, handing_out=True)
            sizer.refresh(round_trip_s=0.001, starting=True)
    clock.now += REFRESH_S  # the transfers ended: the next look finds the downloader free
    sizer.refresh(round_trip_s=0.001)
    assert sizer.target >= 16 + 50


def test_entries_that_go_straight_to_the_wire_keep_a_fast_node_fed_before_its_rate_is_known(
) -> None:
    # given a node without delays whose downloader runs 16 requests at once, eight per site,
    # before any request started
    clock = Clock()
    sizer = sizer_seeing([Downstream(not_started=0, room=16, capacity=16)], clock)
    sizer.refresh(round_trip_s=0.001)
    # when its engine takes eight entries that start at once, then eight its site's limit
    # holds at the download gate, within one look at the downloader
    for _ in range(8):
        sizer.refresh(round_trip_s=0.001, handing_out=True)
        sizer.refresh(round_trip_s=0.001, starting=True)
    assert sizer.target == 16
    for _ in range(8):
        sizer.refresh(round_trip_s=0.001, handing_out=True)
    # then it still wants a downloader's worth beyond those eight (within the slack a target
    # moves by before the Redis thread is told): they start as soon as the first transfers end
    assert abs(sizer.target - 8) <= TARGET_SLACK * 8


def test_a_node_that_wanted_nothing_wakes_its_redis_thread_as_soon_as_it_wants_a_lease() -> None:
    # given a node whose Redis thread was woken to lease, and whose engine then took more
    # than it can start before that lease came (so the thread leased nothing)
    settings = Settings({"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0",
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    channel = Channel()
    link = NodeLink(ClusterConfig.from_settings(settings, "job"), channel,
                    Inbox(lambda call: call(), lambda: False), lambda: None, lambda: None,
                    "none")
    downstream = [Downstream(not_started=0, room=4, capacity=4)]
    link.size_leases(lambda: downstream[0])
    link.leased((Leased("e0", b"request 0", 0),), covered=0)
    assert link.take() is not None
    assert channel.wake.is_set()
    channel.wake.clear()
    downstream[0] = Downstream(not_started=5, room=0, capacity=4)
    time.sleep(REFRESH_S)  # the next look at the downloader is due
    assert link.take() is None
    # when the downloader started what the engine held
    downstream[0] = Downstream(not_started=0, room=4, capacity=4)
    link.request_started()
    # then the thread is woken to lease again, told what to lease
    assert channel.wake.is_set()
    said = [one for batch in channel.drain() for one in cast("list[object]", batch)]
    assert [one.target for one in said if isinstance(one, Demand)] == [3, 0, 4]


def test_a_fixed_prefetch_counts_what_the_engine_holds_unstarted_as_leased_ahead() -> None:
    # given CLUSTERSYNC_PREFETCH = 2 and an engine that holds three requests of a polite site at
    # the download gate (the engine takes up to CONCURRENT_REQUESTS of them)
    clock = Clock()
    seen = [Downstream(not_started=3, room=0, capacity=POLITE_CAPACITY)]
    sizer = LeaseSizer(maximum=2, initial=2, measure=lambda: seen[0], clock=clock, fixed=True)
    # when its lease is sized
    sizer.refresh(round_trip_s=0.001)
    # then it leases nothing more: the queue's other requests are the other nodes'
    assert sizer.target == 0
    # and once its downloader started them, it holds two ahead again, however fast it goes
    seen[0] = Downstream(not_started=0, room=16, capacity=16)
    clock.now += 1.0
    sizer.refresh(round_trip_s=0.001)
    assert sizer.target == 2
