"""The entries a node leased ahead: handed out in order, handed back when outranked."""

from __future__ import annotations

import threading

from scrapy_clustersync.node.prefetch import Prefetch
from scrapy_clustersync.node.write_stream import RecentPushes
from scrapy_clustersync.store import Leased


def leased(*priorities: int) -> list[Leased]:
    return [Leased(f"e{i}", f"request {i}".encode(), priority)
            for i, priority in enumerate(priorities)]


def test_entries_leased_after_every_push_are_handed_out_in_lease_order() -> None:
    prefetch = Prefetch(low_water=1, wake=lambda: None)
    recent = RecentPushes()
    recent.add(1, 9)  # a push Redis had when the lease was made
    prefetch.add(leased(3, 0), covered=1)
    assert [prefetch.take(recent, 0), prefetch.take(recent, 0), prefetch.take(recent, 0)] == [
        ("e0", b"request 0"), ("e1", b"request 1"), None]
    assert prefetch.returned() == []


def test_an_entry_outranked_by_a_later_push_is_handed_back_not_out() -> None:
    # given entries of priorities 3 and 0 leased before the node's second push reached Redis
    prefetch = Prefetch(low_water=0, wake=lambda: None)
    recent = RecentPushes()
    prefetch.add(leased(3, 0), covered=1)
    # when the node pushes a request of priority 2
    recent.add(2, 2)
    # then the entry of priority 3 still goes first, the one of priority 0 goes back
    assert prefetch.take(recent, 0) == ("e0", b"request 0")
    assert prefetch.take(recent, 0) is None
    assert prefetch.returned() == ["e1"]
    assert prefetch.outranked == 1
    assert prefetch.returned() == []  # each id is handed back once


def test_a_waiting_reactor_is_freed_by_a_lease_that_covers_its_pushes() -> None:
    prefetch = Prefetch(low_water=0, wake=lambda: None)
    freed = threading.Event()

    def reactor() -> None:
        prefetch.wait(pushes=2, timeout_s=10, give_up=lambda: False)
        freed.set()

    waiting = threading.Thread(target=reactor)
    waiting.start()
    prefetch.add([], covered=1)  # a lease made before the second push: not enough
    assert not freed.wait(0.2)
    assert prefetch.awaited(pushes_settled=2)  # the Redis thread leases again at once
    prefetch.add([], covered=2)  # the queue was empty, but the lease saw both pushes
    assert freed.wait(5)
    waiting.join()
    assert not prefetch.awaited(pushes_settled=2)


def test_a_waiting_reactor_gives_up_when_told() -> None:
    prefetch = Prefetch(low_water=0, wake=lambda: None)
    away = threading.Event()
    done = threading.Event()

    def reactor() -> None:
        prefetch.wait(pushes=1, timeout_s=10, give_up=away.is_set)
        done.set()

    waiting = threading.Thread(target=reactor)
    waiting.start()
    away.set()
    prefetch.wake_waiters()
    assert done.wait(5)
    waiting.join()


def waits(prefetch: Prefetch, pushes: int) -> bool:
    """Whether a reactor asking ``prefetch`` for a lease after ``pushes`` pushes waits (it is
    still waiting half a second later); it is let go at the end either way."""
    waiter = threading.Thread(
        target=lambda: prefetch.wait(pushes=pushes, timeout_s=10, give_up=lambda: False))
    waiter.start()
    waiter.join(0.5)
    waited = waiter.is_alive()
    prefetch.add([], covered=pushes)  # a lease that covers them lets a waiting reactor go
    waiter.join()
    return waited


def test_after_a_wait_that_ran_out_the_reactor_does_not_wait_again_until_a_lease_comes() -> None:
    # given a reactor whose wait for a lease ran out (Redis stopped answering)
    prefetch = Prefetch(low_water=0, wake=lambda: None)
    prefetch.wait(pushes=1, timeout_s=0.05, give_up=lambda: False)
    # then it does not wait when it asks again
    assert not waits(prefetch, pushes=2)
    # and it waits again once a lease came back (waits() ends with one)
    assert waits(prefetch, pushes=3)


def test_pushes_redis_applied_are_forgotten_when_nothing_is_prefetched() -> None:
    recent = RecentPushes()
    for number in range(1, 1001):
        recent.add(number, -number)  # falling priorities: each one kept
    Prefetch(low_water=0, wake=lambda: None).take(recent, pushes_settled=1000)
    assert recent.highest_after(0) == float("-inf")


def test_a_node_declared_dead_drops_every_entry_it_has_not_handed_out() -> None:
    # given a node whose reactor took two entries and handed one back (outranked), one waiting
    prefetch = Prefetch(low_water=0, wake=lambda: None)
    recent = RecentPushes()
    prefetch.add(leased(3, 0, 5, 5), covered=1)
    recent.add(2, 2)
    assert prefetch.take(recent, 0) == ("e0", b"request 0")
    assert prefetch.take(recent, 0) == ("e2", b"request 2")  # e1 handed back on the way
    # when the node learns it was declared dead and drops what it holds
    dropped = prefetch.drop_all()
    # then the entries not handed to Scrapy are dropped, once, and none is handed out after
    assert dropped == ["e1", "e3"]
    assert prefetch.take(RecentPushes(), 0) is None
    assert prefetch.drop_all() == [] and prefetch.returned() == []
