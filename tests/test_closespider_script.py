"""closespider.lua against a real redis-server: the cluster's CLOSESPIDER_* counts, the stop
they make, page tickets, retried calls and resume."""

from __future__ import annotations

from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.closespider_script import CloseLimits, SpiderCounts
from scrapy_clustersync.store.control_state import STOPPING
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

PAGES_50 = CloseLimits(pagecount=50)


def joined(redis_server: RedisServer, node: str) -> JobStore:
    store = JobStore(make_client(redis_server.url), "job", node)
    store.join(ttl_ms=10_000)
    return store


def test_two_nodes_counts_add_up_and_the_one_that_reaches_the_limit_stops_the_job(
    redis_server: RedisServer,
) -> None:
    # Given two nodes of one job with CLOSESPIDER_PAGECOUNT = 50
    one, two = joined(redis_server, "n1"), joined(redis_server, "n2")
    # When they count 30 and then 20 pages
    first = one.closespider.count(new_call_id(), SpiderCounts(pages=30), PAGES_50)
    second = two.closespider.count(new_call_id(), SpiderCounts(pages=20), PAGES_50)
    # Then the first call leaves the job running, the second stops it with Scrapy's reason
    assert (first.pages, first.stop_reason) == (30, "")
    assert (second.pages, second.stop_reason) == (50, "closespider_pagecount")
    state = one.control_state()
    assert (state.state, state.reason) == (STOPPING, "closespider_pagecount")


def test_a_retried_call_adds_nothing_more_and_answers_the_same_tickets(
    redis_server: RedisServer,
) -> None:
    # Given a node that asked for 8 tickets and counted 5 pages under one call id
    store = joined(redis_server, "n1")
    call_id = new_call_id()
    first = store.closespider.count(call_id, SpiderCounts(pages=5), PAGES_50, want=8)
    # When the same call is sent again (a timed-out call redis-py retries)
    again = store.closespider.count(call_id, SpiderCounts(pages=5), PAGES_50, want=8)
    # Then it counted once and granted once
    assert (first.pages, first.granted) == (5, 8)
    assert (again.pages, again.granted) == (5, 8)
    assert store.closespider.count(new_call_id(), SpiderCounts(), PAGES_50, want=50).granted == 42


def test_tickets_never_exceed_the_page_limit_and_what_is_given_back_is_granted_again(
    redis_server: RedisServer,
) -> None:
    # Given two nodes asking for 16 tickets at a time against a limit of 50
    one, two = joined(redis_server, "n1"), joined(redis_server, "n2")
    granted = [store.closespider.count(new_call_id(), SpiderCounts(), PAGES_50, want=16).granted
               for store in (one, two, one, two, one)]
    # Then they got 50 in all, the last call none
    assert granted == [16, 16, 16, 2, 0]
    # When a node gives 3 back, another can take exactly those
    one.closespider.count(new_call_id(), SpiderCounts(), PAGES_50, give_back=3)
    assert two.closespider.count(new_call_id(), SpiderCounts(), PAGES_50, want=16).granted == 3


def test_items_errors_and_pages_without_items_each_stop_the_job_with_their_reason(
    redis_server: RedisServer,
) -> None:
    cases = [(CloseLimits(itemcount=3), SpiderCounts(items=3), "closespider_itemcount"),
             (CloseLimits(errorcount=2), SpiderCounts(errors=2), "closespider_errorcount"),
             (CloseLimits(pagecount_no_item=4), SpiderCounts(pages=4),
              "closespider_pagecount_no_item")]
    for number, (limits, counts, reason) in enumerate(cases):
        store = JobStore(make_client(redis_server.url), f"job{number}", "n1")
        store.join(ttl_ms=10_000)
        below = SpiderCounts(counts.pages - 1 if counts.pages else 0,
                             counts.items - 1 if counts.items else 0,
                             counts.errors - 1 if counts.errors else 0)
        assert store.closespider.count(new_call_id(), below, limits).stop_reason == ""
        rest = SpiderCounts(counts.pages - below.pages, counts.items - below.items,
                            counts.errors - below.errors)
        assert store.closespider.count(new_call_id(), rest, limits).stop_reason == reason
        assert store.control_state().reason == reason


def test_a_timeout_is_reached_on_the_redis_clock(redis_server: RedisServer) -> None:
    # Given a job whose counts started 10 s ago on the Redis clock
    store = joined(redis_server, "n1")
    limits = CloseLimits(timeout_s=5.0)
    assert store.closespider.count(new_call_id(), SpiderCounts(), limits).stop_reason == ""
    client = store.client
    client.hincrby(store.keys.closespider, "started_ms", -10_000)
    # When a node checks
    reached = store.closespider.count(new_call_id(), SpiderCounts(), limits)
    # Then the timeout stopped the job
    assert reached.stop_reason == "closespider_timeout"


def test_resume_after_a_stop_for_a_limit_counts_again_from_zero(
    redis_server: RedisServer,
) -> None:
    # Given a job stopped by its page limit
    store = joined(redis_server, "n1")
    store.closespider.count(new_call_id(), SpiderCounts(pages=50), PAGES_50, want=50)
    assert store.control_state().reason == "closespider_pagecount"
    # When it is resumed
    store.set_control("resume")
    # Then its counts and tickets start again, and it stops again only at the limit
    again = store.closespider.count(new_call_id(), SpiderCounts(pages=10), PAGES_50, want=16)
    assert (again.pages, again.stop_reason, again.granted) == (10, "", 16)
    assert store.control_state().reason == ""


def test_a_manual_stop_is_not_taken_for_a_limit(redis_server: RedisServer) -> None:
    # Given a job stopped by `clustersync stop`
    store = joined(redis_server, "n1")
    store.set_control("stop")
    # When a node counts past the limit
    counted = store.closespider.count(new_call_id(), SpiderCounts(pages=60), PAGES_50, want=4)
    # Then no limit reason is recorded and no ticket is granted
    assert (counted.stop_reason, counted.granted) == ("", 0)
