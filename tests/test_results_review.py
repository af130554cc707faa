"""Attacks on the results stream's once-only promise (docs/results.md) against a real
redis-server: a node that lost its lease while it worked must not get its copy of a page's
results into the stream by another road."""

from __future__ import annotations

import time

from test_results_store import blob, stream_ids

from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import Ack, AckResults, Push, PushFlags
from testkit.redis_server import RedisServer

from support import joined, push_op


def retry_of(push: Push, replaces: bool = True) -> Push:
    """The push of ``push``'s request retried in the downloader (RetryMiddleware: a copy
    with ``dont_filter=True``), flagged as the replacement of the lease it came from."""
    flags = PushFlags.DONT_FILTER | (PushFlags.REPLACES if replaces else 0)
    return Push(b"", push.priority, push.request, flags, push.site)


def test_a_retry_of_a_request_another_node_crawled_meanwhile_is_not_queued(
    redis_server: RedisServer,
) -> None:
    # given an entry leased by n1, whose lease ends while n1 downloads it
    first, epoch = joined(redis_server)
    page = push_op("http://a/1")
    first.flush(epoch, [page], new_call_id())
    [(entry, _, _)] = first.lease(epoch, 10, 1, new_call_id())
    time.sleep(0.02)
    # and n2 leases it again, crawls it and acks it with its items
    second = JobStore(make_client(redis_server.url), "job", "n2")
    second.join(ttl_ms=10_000)
    [(again, _, _)] = second.lease(epoch, 10, 10_000, new_call_id())
    assert again == entry
    second.flush(epoch, [AckResults(entry, blob("fp:0"))], new_call_id())
    # when n1's download fails and its retry replaces the lease it no longer holds
    first.flush(epoch, [retry_of(page), Ack(entry)], new_call_id())
    # then the retry is not queued: nobody crawls the page a second time and writes fp:0 again
    assert first.lease(epoch, 10, 10_000, new_call_id()) == []
    assert stream_ids(first) == ["fp:0"]


def test_a_retry_of_a_request_still_held_is_queued_with_its_ack(
    redis_server: RedisServer,
) -> None:
    # given an entry leased by n1
    store, epoch = joined(redis_server)
    page = push_op("http://a/1")
    store.flush(epoch, [page], new_call_id())
    [(entry, _, _)] = store.lease(epoch, 10, 10_000, new_call_id())
    # when its retry replaces it (push and ack in one call)
    store.flush(epoch, [retry_of(page), Ack(entry)], new_call_id())
    # then the retry is queued and the entry acked
    [(retry, _, _)] = store.lease(epoch, 10, 10_000, new_call_id())
    assert retry != entry
