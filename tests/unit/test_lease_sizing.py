"""A sized lease is what the node can start before the next lease, less what its engine already
holds and has not started (node/lease_sizing.py)."""

from __future__ import annotations

from scrapy_clustersync.node.lease_sizing import REFRESH_S, Downstream, LeaseSizer

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
        sizer.started()
        sizer.refresh(round_trip_s=0.001)
    downstream[0] = Downstream(not_started=0, room=1, capacity=POLITE_CAPACITY)
    clock.now += REFRESH_S
    # then it wants what it can start before its next lease again
    assert sizer.refresh(round_trip_s=0.001)
    assert sizer.target >= POLITE_CAPACITY


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
            sizer.started()
        sizer.refresh(round_trip_s=0.001)
    assert sizer.target >= 16 + 50
