"""ClusterScheduler through Scrapy's scheduler interface, on a fake Redis thread."""

from __future__ import annotations

from pathlib import Path

import msgpack
from scrapy import Request
from scrapy.exceptions import CloseSpider
from twisted.python.failure import Failure

from scrapy_clustersync.codec import LEASE_META_KEY
from scrapy_clustersync.plugin.cluster_scheduler import NO_ENGINE_WAIT_S, ClusterScheduler
from scrapy_clustersync.store import Ack, DeadLetterEntry, Push, Release
from scrapy_clustersync.store.write_ops import PushFlags

from .node_fakes import FakeRedisThread, fake_engine, make_scheduler


def not_a_spider_method(response: object) -> None:
    """A callback another node could not find by name."""


def lease_to(scheduler: ClusterScheduler, thread: FakeRedisThread, url: str, entry_id: str) -> None:
    """Redis leased ``url`` to the node as ``entry_id``."""
    thread.leased.append((entry_id, scheduler.codec.encode(Request(url))))


def leased_request(
    tmp_path: Path, url: str = "http://a/1", entry_id: str = "e1"
) -> tuple[ClusterScheduler, FakeRedisThread, Request]:
    """A node that handed the engine one leased request (nothing submitted since)."""
    scheduler, thread = make_scheduler(tmp_path)
    lease_to(scheduler, thread, url, entry_id)
    request = scheduler.next_request()
    assert request is not None
    thread.submitted.clear()
    return scheduler, thread, request


def test_a_new_request_is_buffered_as_one_push_of_its_fingerprint_and_priority(
    tmp_path: Path,
) -> None:
    # given an open node
    scheduler, thread = make_scheduler(tmp_path)
    # when the engine enqueues a new request
    accepted = scheduler.enqueue_request(Request("http://a/1", priority=7))
    # then it is accepted and one push goes to the Redis thread
    [push] = thread.ops(Push)
    assert accepted is True
    assert len(push.fingerprint) == 20 and push.priority == 7 and not push.dont_filter


def test_a_request_this_node_already_sent_is_a_duplicate_and_is_not_pushed_again(
    tmp_path: Path,
) -> None:
    # given a node that sent a URL
    scheduler, thread = make_scheduler(tmp_path)
    scheduler.enqueue_request(Request("http://a/1"))
    # when the same URL comes again
    accepted = scheduler.enqueue_request(Request("http://a/1"))
    # then it is dropped as a duplicate, as Scrapy's scheduler does
    assert accepted is False
    assert len(thread.ops(Push)) == 1
    scheduler.publish_counts()
    assert scheduler.stats.get_value("dupefilter/filtered") == 1


def test_a_dont_filter_request_is_pushed_every_time_without_a_fingerprint(tmp_path: Path) -> None:
    scheduler, thread = make_scheduler(tmp_path)
    for _ in range(2):
        assert scheduler.enqueue_request(Request("http://a/1", dont_filter=True))
    assert [(op.fingerprint, op.dont_filter) for op in thread.ops(Push)] == [(b"", True)] * 2


def test_after_redis_came_back_older_a_url_sent_before_is_pushed_again(tmp_path: Path) -> None:
    # given a node that sent a URL, then learned that Redis lost writes
    scheduler, thread = make_scheduler(tmp_path)
    scheduler.enqueue_request(Request("http://a/1"))
    thread.rollback_count = 1
    # when the URL comes again
    accepted = scheduler.enqueue_request(Request("http://a/1"))
    # then it goes to Redis again (its push may be among the lost writes)
    assert accepted is True
    assert len(thread.ops(Push)) == 2


def test_next_request_hands_out_the_leased_request_with_its_lease(tmp_path: Path) -> None:
    # given a node with one leased entry
    scheduler, thread = make_scheduler(tmp_path)
    lease_to(scheduler, thread, "http://a/1", "e1")
    assert scheduler.has_pending_requests() and len(scheduler) == 1
    # when the engine asks for work
    request = scheduler.next_request()
    # then it gets that request, carrying its lease, and nothing more is pending
    assert request is not None and request.url == "http://a/1"
    assert request.meta[LEASE_META_KEY] == "e1"
    assert scheduler.next_request() is None
    assert not scheduler.has_pending_requests()


def test_an_entry_that_cannot_be_decoded_is_dead_lettered_and_the_next_one_served(
    tmp_path: Path,
) -> None:
    scheduler, thread = make_scheduler(tmp_path)
    thread.leased.append(("bad", msgpack.packb([99, {}])))
    lease_to(scheduler, thread, "http://a/2", "good")
    request = scheduler.next_request()
    assert request is not None and request.url == "http://a/2"
    [dead] = thread.ops(DeadLetterEntry)
    assert dead.entry_id == "bad" and "cannot be decoded" in dead.reason


def test_no_work_is_handed_out_while_writes_wait_for_redis(tmp_path: Path) -> None:
    # given a node with leased work whose Redis thread has too many writes waiting
    scheduler, thread = make_scheduler(tmp_path)
    lease_to(scheduler, thread, "http://a/1", "e1")
    thread.accepting = False
    # then the engine gets nothing until they are sent
    assert scheduler.next_request() is None
    thread.accepting = True
    assert scheduler.next_request() is not None


def test_no_work_is_handed_out_once_the_node_must_close(tmp_path: Path) -> None:
    scheduler, thread = make_scheduler(tmp_path)
    lease_to(scheduler, thread, "http://a/1", "e1")
    thread.finished_with = "finished"
    assert scheduler.next_request() is None
    assert scheduler.outcome == "finished"


def test_a_redirect_acks_the_leased_request_after_its_replacement_is_pushed(
    tmp_path: Path,
) -> None:
    # given a leased request the downloader replaced by a redirect (meta copied, lease too)
    scheduler, thread, request = leased_request(tmp_path)
    redirect = request.replace(url="http://a/elsewhere")
    # when the redirect is enqueued
    assert scheduler.enqueue_request(redirect) is True
    # then the replacement is pushed first and the original acked after it
    assert thread.kinds() == ["Push", "Ack"]
    assert thread.submitted[1] == Ack("e1")
    # flagged as a replacement: Redis queues it only if that ack takes effect
    assert thread.ops(Push)[0].flags & PushFlags.REPLACES


def test_a_retry_acks_the_leased_request_after_its_copy_is_pushed(tmp_path: Path) -> None:
    scheduler, thread, request = leased_request(tmp_path)
    retry = request.replace(dont_filter=True, priority=request.priority - 1)
    assert scheduler.enqueue_request(retry) is True
    assert thread.kinds() == ["Push", "Ack"]
    assert thread.ops(Push)[0].dont_filter
    assert thread.ops(Push)[0].flags & PushFlags.REPLACES


def test_a_child_a_callback_yields_is_no_replacement(tmp_path: Path) -> None:
    scheduler, thread, request = leased_request(tmp_path)
    fake_engine(scheduler).scraper.enqueue_scrape(None, request)
    scheduler.enqueue_request(request.replace(url="http://a/child"))
    assert not thread.ops(Push)[0].flags & PushFlags.REPLACES


def test_a_replacement_that_cannot_travel_is_crawled_here_under_the_lease(tmp_path: Path) -> None:
    # given a leased request replaced by one whose callback is not a spider method
    scheduler, thread, request = leased_request(tmp_path)
    replacement = request.replace(url="http://a/local", callback=not_a_spider_method)
    # when it is enqueued
    accepted = scheduler.enqueue_request(replacement)
    # then the node keeps it, crawls it next, and the lease is neither acked nor released
    assert accepted is True
    assert thread.submitted == []
    assert scheduler.next_request() is replacement
    assert "e1" in scheduler.leases.inflight


def test_a_leased_request_is_acked_only_once_the_scraper_is_done_with_it(tmp_path: Path) -> None:
    # given a leased request whose response is in the scraper
    scheduler, thread, request = leased_request(tmp_path)
    scraper = fake_engine(scheduler).scraper
    scraper.enqueue_scrape(None, request)
    # when its callback yields a link (the parent's meta, lease included, copied into it)
    scheduler.enqueue_request(request.replace(url="http://a/child"))
    # then nothing is acked while the scraper still works on the parent
    assert thread.ops(Ack) == []
    # and once the scraper is done, the ack follows the child's push
    scraper.scraping[request.url].callback(None)
    assert thread.kinds() == ["Push", "Ack"]


def test_a_request_whose_callback_raised_close_spider_is_handed_back(tmp_path: Path) -> None:
    # given a leased request whose callback raises CloseSpider
    scheduler, thread, request = leased_request(tmp_path)
    scraper = fake_engine(scheduler).scraper
    scraper.enqueue_scrape(None, request)
    scraper.handle_spider_error(Failure(CloseSpider("enough")), request)
    # when the scraper is done with it
    scraper.scraping[request.url].callback(None)
    # then it is released to the queue for another node, not acked
    assert thread.submitted == [Release("e1")]


def test_when_the_engine_goes_idle_requests_that_never_reached_the_scraper_are_acked(
    tmp_path: Path,
) -> None:
    scheduler, thread, request = leased_request(tmp_path)
    scheduler.engine_idle()
    assert thread.submitted == [Ack("e1")]
    assert thread.idle is True


def test_closing_hands_back_unfinished_leases_to_the_redis_thread(tmp_path: Path) -> None:
    scheduler, thread, request = leased_request(tmp_path)
    scheduler.close("shutdown")
    assert thread.closed_with == ["e1"]
    assert not list((tmp_path / "spool").rglob("*.spool"))


def test_writes_redis_did_not_take_at_close_are_kept_in_the_spool(tmp_path: Path) -> None:
    # given a node whose Redis thread could not send two writes before the node closed
    thread = FakeRedisThread()
    thread.undeliverable = [Ack("e1"), Release("e2")]
    scheduler, _ = make_scheduler(tmp_path, thread)
    # when it closes
    scheduler.close("shutdown")
    # then they are kept on disk for the next node started here
    [spooled] = (tmp_path / "spool").rglob("*.spool")
    assert spooled.stat().st_size > 0


def test_the_redis_threads_totals_reach_the_crawlers_stats_once(tmp_path: Path) -> None:
    scheduler, thread = make_scheduler(tmp_path)
    thread.pushed_total = 5
    scheduler.publish_counts()
    scheduler.publish_counts()
    assert scheduler.stats.get_value("clustersync/pushed") == 5


def test_a_dont_filter_scrapy_reads_as_true_or_false_is_pushed_as_such(tmp_path: Path) -> None:
    # given requests whose dont_filter is not a bool, which plain Scrapy accepts for its truth
    scheduler, thread = make_scheduler(tmp_path)
    for url, dont_filter in (("http://a/1", None), ("http://a/2", "yes"), ("http://a/3", 0)):
        request = Request(url, dont_filter=dont_filter)  # type: ignore[arg-type]
        # when they are enqueued
        assert scheduler.enqueue_request(request)
    # then each push says whether it skips dedup, as an int Redis reads, and can be encoded
    assert [op.dont_filter for op in thread.ops(Push)] == [False, True, False]
    assert all(isinstance(op.args()[4], int) for op in thread.ops(Push))


def test_a_scheduler_can_be_built_for_a_crawler_whose_spider_has_no_name() -> None:
    # given a crawler of Scrapy's base Spider, as Scrapy's own scheduler tests build one
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(Spider, {"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0"})
    # when the scheduler is built from it
    scheduler = ClusterScheduler.from_crawler(crawler)
    # then it has a job of its own name rather than an AttributeError
    assert scheduler.config.job == "default"


def test_a_node_with_nothing_to_download_asks_for_its_own_new_requests_without_waiting(
    tmp_path: Path,
) -> None:
    # given a node that has just enqueued a request and holds nothing else
    scheduler, thread = make_scheduler(tmp_path)
    scheduler.enqueue_request(Request("http://a/1"))
    # when the engine asks for the next request
    request = scheduler.next_request()
    # then it gets none yet, and the Redis thread is asked to lease the request back as soon
    # as it is in Redis (as Scrapy hands it out at once); the engine is woken when it comes
    assert request is None
    assert thread.lease_wanted == 1 and thread.settled == []


def test_a_scheduler_no_engine_drives_waits_for_its_own_new_requests(tmp_path: Path) -> None:
    # given a scheduler called directly (as Scrapy's own scheduler tests call it), no engine
    # driving it, that has just enqueued a request and holds nothing else
    scheduler, thread = make_scheduler(tmp_path)
    fake_engine(scheduler)._slot.scheduler = None
    scheduler.enqueue_request(Request("http://a/1"))
    # when it is asked for the next request
    scheduler.next_request()
    # then it waits for the request to come back leased (a bounded time): there is no engine
    # to wake when it comes; a crawl's engine never waits (test above)
    assert thread.settled == [NO_ENGINE_WAIT_S]


def test_a_node_that_downloads_never_waits_for_redis(tmp_path: Path) -> None:
    # given a node downloading a leased request, with a new request of its own in transit
    scheduler, thread = make_scheduler(tmp_path)
    lease_to(scheduler, thread, "http://a/1", "e1")
    assert scheduler.next_request() is not None
    scheduler.enqueue_request(Request("http://a/2"))
    # when the engine asks for more
    assert scheduler.next_request() is None
    # then it did not ask for a lease out of turn: the download goes on while it travels
    assert thread.lease_wanted == 0


def test_start_goes_on_only_once_the_engine_was_handed_a_request(tmp_path: Path) -> None:
    # given a node that starves: start() just yielded its first request, nothing else is held
    scheduler, thread = make_scheduler(tmp_path)
    scheduler.enqueue_request(Request("http://a/1"))
    assert scheduler.next_request() is None  # not leased back yet
    sent = scheduler.own_requests_sent()
    assert sent is not None
    fired: list[object] = []
    sent.addCallback(fired.append)
    # when the lease comes back, start() still waits: the engine has not sent it yet
    lease_to(scheduler, thread, "http://a/1", "e1")
    thread.changed()
    assert fired == []
    # then it goes on once the engine was handed the request, as in Scrapy
    assert scheduler.next_request() is not None
    assert fired == [None]


def test_start_does_not_wait_while_the_node_downloads(tmp_path: Path) -> None:
    scheduler, thread = make_scheduler(tmp_path)
    lease_to(scheduler, thread, "http://a/1", "e1")
    assert scheduler.next_request() is not None  # downloading
    scheduler.enqueue_request(Request("http://a/2"))
    assert scheduler.own_requests_sent() is None
