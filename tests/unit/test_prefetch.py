"""The entries a node leased ahead: handed out in order, handed back when outranked."""

from __future__ import annotations

from scrapy_clustersync.node.prefetch import Prefetch, RecentPushes
from scrapy_clustersync.store import Leased, PushFlags


def leased(*priorities: int) -> list[Leased]:
    return [Leased(f"e{i}", f"request {i}".encode(), priority)
            for i, priority in enumerate(priorities)]


def test_entries_leased_after_every_push_are_handed_out_in_lease_order() -> None:
    prefetch = Prefetch()
    recent = RecentPushes()
    recent.add(1, 9)  # a push Redis had when the lease was made
    prefetch.add(leased(3, 0), covered=1)
    handed_back: list[str] = []
    taken = [prefetch.take(recent, 0, handed_back) for _ in range(3)]
    assert taken == [("e0", b"request 0"), ("e1", b"request 1"), None]
    assert handed_back == []


def test_an_entry_outranked_by_a_later_push_is_handed_back_not_out() -> None:
    # given entries of priorities 3 and 0 leased before the node's second push reached Redis
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add(leased(3, 0), covered=1)
    # when the node pushes a request of priority 2
    recent.add(2, 2)
    # then the entry of priority 3 still goes first, the one of priority 0 goes back, once
    handed_back: list[str] = []
    assert prefetch.take(recent, 0, handed_back) == ("e0", b"request 0")
    assert prefetch.take(recent, 0, handed_back) is None
    assert prefetch.take(recent, 0, handed_back) is None
    assert handed_back == ["e1"]
    assert prefetch.outranked == 1


def test_the_pushes_a_lease_covered_are_counted_from_the_latest_lease() -> None:
    prefetch = Prefetch()
    prefetch.add([], covered=2)  # the queue was empty, but the lease saw both pushes
    prefetch.add(leased(0), covered=1)  # an answer can never cover fewer: the max is kept
    assert prefetch.covered == 2


def test_pushes_redis_applied_are_forgotten_when_nothing_is_prefetched() -> None:
    recent = RecentPushes()
    for number in range(1, 1001):
        recent.add(number, -number)  # falling priorities: each one kept
    Prefetch().take(recent, 1000, [])
    assert recent.highest_after(0) == float("-inf")


def test_a_node_declared_dead_drops_every_entry_it_has_not_handed_out() -> None:
    # given a node whose reactor took two entries and handed one back (outranked), one waiting
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add(leased(3, 0, 5, 5), covered=1)
    recent.add(2, 2)
    handed_back: list[str] = []
    assert prefetch.take(recent, 0, handed_back) == ("e0", b"request 0")
    assert prefetch.take(recent, 0, handed_back) == ("e2", b"request 2")  # e1 handed back
    # when the node learns it was declared dead and drops what it holds
    dropped = prefetch.drop_all()
    # then the entries not handed to Scrapy are dropped, once, and none is handed out after
    assert handed_back == ["e1"]
    assert dropped == ["e3"]
    assert prefetch.take(RecentPushes(), 0, handed_back) is None
    assert prefetch.drop_all() == []


def test_with_nothing_downloading_a_later_push_served_first_within_a_priority_outranks() -> None:
    # given a LIFO entry of priority 0 leased before the node pushed another of priority 0
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("0-old", b"old", 0)], covered=1)
    recent.add(2, 0, PushFlags.LIFO)
    handed_back: list[str] = []
    # when the engine, downloading nothing, takes an entry
    taken = prefetch.take(recent, 0, handed_back, exact=True)
    # then the entry goes back: the newer request comes first in a LIFO queue, as in Scrapy
    assert taken is None
    assert handed_back == ["0-old"]


def test_while_downloading_prefetch_may_serve_equal_priorities_leased_earlier() -> None:
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("0-old", b"old", 0)], covered=1)
    recent.add(2, 0, PushFlags.LIFO)
    assert prefetch.take(recent, 0, [], exact=False) == ("0-old", b"old")


def test_a_start_request_is_served_after_a_later_request_of_its_priority_fifo_or_not() -> None:
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("1-start", b"start", 0), Leased("0-other", b"other", 0)], covered=1)
    recent.add(2, 0, PushFlags(0))  # another request, FIFO
    handed_back: list[str] = []
    # the start request goes back; the other request leased with it is not outranked (FIFO)
    assert prefetch.take(recent, 0, handed_back, exact=True) == ("0-other", b"other")
    assert handed_back == ["1-start"]


def test_only_the_pushes_made_before_the_engine_asked_count_for_its_answer() -> None:
    # given the engine starved after the node's second push; a start request leased for it
    prefetch = Prefetch()
    recent = RecentPushes()
    recent.add(1, 0, PushFlags.START)
    recent.add(2, 0, PushFlags.START)
    prefetch.add([Leased("1-second", b"second", 0)], covered=2)
    # when a callback pushed a request the queue serves first, after the engine asked
    recent.add(3, 0, PushFlags.LIFO)
    # then the engine still gets the start request, as Scrapy's scheduler gave it then
    assert prefetch.take(recent, 0, [], exact=True, until=2) == ("1-second", b"second")


def test_an_entry_handed_back_outranks_lower_ones_leased_before_redis_had_it_again() -> None:
    # given an entry of priority 2 handed back (a newer push of its priority comes first, LIFO),
    # and one of priority 1 leased before the hand-back reached Redis
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("0-two", b"two", 2)], covered=1)
    recent.add(2, 2, PushFlags.LIFO)
    prefetch.add([Leased("0-new", b"new", 2), Leased("0-one", b"one", 1)], covered=2)
    handed_back: list[str] = []
    assert prefetch.take(recent, 0, handed_back, exact=True) == ("0-new", b"new")
    assert handed_back == ["0-two"]
    # when the next lease, made once Redis released it, brings it back behind the lower one
    prefetch.add([Leased("0-two", b"two", 2)], covered=2, returned=1)
    # then the lower one goes back too: the queue serves the entry handed back first
    assert prefetch.take(recent, 0, handed_back, exact=True) == ("0-two", b"two")
    assert handed_back == ["0-two", "0-one"]


def test_entries_leased_after_redis_had_the_hand_backs_are_handed_out_in_lease_order() -> None:
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("0-two", b"two", 2)], covered=1)
    recent.add(2, 3)
    assert prefetch.take(recent, 0, []) is None  # handed back: the push of priority 3 outranks
    prefetch.add([Leased("0-three", b"three", 3), Leased("0-one", b"one", 1)], covered=2,
                 returned=1)
    taken = [prefetch.take(recent, 0, []) for _ in range(2)]
    assert taken == [("0-three", b"three"), ("0-one", b"one")]


def test_while_downloading_a_start_request_goes_back_for_a_later_request_of_its_priority() -> None:
    # given a start request leased ahead, and a callback's request of its priority pushed after
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("1-start", b"start", 0)], covered=1)
    recent.add(2, 0, PushFlags.LIFO)
    handed_back: list[str] = []
    # when the engine asks while it downloads
    # then the start request goes back: Scrapy serves start requests last whatever it downloads
    assert prefetch.take(recent, 0, handed_back, exact=False) is None
    assert handed_back == ["1-start"]


def test_while_downloading_a_start_request_may_pass_a_later_start_request() -> None:
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("1-first", b"first", 0)], covered=1)
    recent.add(2, 0, PushFlags.START)
    assert prefetch.take(recent, 0, [], exact=False) == ("1-first", b"first")


def test_a_start_request_goes_back_when_another_request_of_its_priority_was_handed_back() -> None:
    # given another request handed back (outranked), and a start request of its priority leased
    # before Redis had the hand-back
    prefetch = Prefetch()
    recent = RecentPushes()
    prefetch.add([Leased("0-other", b"other", 0)], covered=1)
    recent.add(2, 1)
    prefetch.add([Leased("1-start", b"start", 0)], covered=2, returned=0)
    handed_back: list[str] = []
    # when the engine takes while it downloads
    assert prefetch.take(recent, 0, handed_back, exact=False) is None
    # then both go back: the push outranks the other request, which the queue then serves
    # before the start request
    assert handed_back == ["0-other", "1-start"]
