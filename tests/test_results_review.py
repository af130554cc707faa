"""Attacks on the results stream's once-only promise (docs/results.md) against a real
redis-server: a node that lost its lease while it worked must not get its copy of a page's
results into the stream by another road."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgpack
from test_results_crawl import (
    ITEMS_PER_PAGE,
    KEYS,
    expected_item_count,
    listing_node,
    result_ids,
)
from test_results_store import blob, stream_ids

from scrapy_clustersync.results import decode_record
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.write_ops import Ack, AckResults, Push, PushFlags
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    joined,
    missing_pages,
    project_with_spiders,
    push_op,
    start_node,
    wait_all,
    wait_until,
)


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


RETRIED = '''
    import scrapy


    class RetriedSpider(scrapy.Spider):
        """Twenty pages, two items each."""

        name = "retried"

        async def start(self):
            for i in range(20):
                yield scrapy.Request(f"{self.start_url}p/{i}")

        def parse(self, response):
            yield {"page": response.url, "n": 0}
            yield {"page": response.url, "n": 1}
'''


class HangingSite:
    """Pages that answer at once, except the first request of each page from the User-Agent
    ``hang_for``, which hangs until the site stops (the node times it out and retries)."""

    def __init__(self, hang_for: str) -> None:
        self.hung: set[str] = set()
        self.release = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.headers.get("User-Agent") == hang_for and self.path not in site.hung:
                    site.hung.add(self.path)
                    site.release.wait(60)
                    return
                body = b"<html><body>page</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()


def test_a_node_frozen_with_downloads_under_way_retries_none_of_the_pages_crawled_meanwhile(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    # given a node whose downloads hang, frozen (SIGSTOP) while they are under way
    web = HangingSite(hang_for="frozen")
    project = project_with_spiders(tmp_path, "retried", RETRIED)
    settings = {"CLUSTERSYNC_HEARTBEAT_INTERVAL": "0.5", "CLUSTERSYNC_NODE_DEAD_AFTER": "1.5",
                "CLUSTERSYNC_LEASE_TIMEOUT": "30", "CONCURRENT_REQUESTS": "4",
                "DOWNLOAD_TIMEOUT": "2", "RETRY_TIMES": "1"}
    try:
        frozen = start_node("frozen", redis_server.url, web.url, tmp_path, settings,
                            project_dir=project, spider="retried")
        wait_until(lambda: len(web.hung) >= 1, 30, "a download of the node to hang")
        frozen.process.send_signal(signal.SIGSTOP)
        hung = set(web.hung)
        # when another node declares it dead, crawls its pages and ends the job
        other = start_node("other", redis_server.url, web.url, tmp_path, settings,
                           project_dir=project, spider="retried")
        wait_all([other], timeout_s=60)
        # and the frozen node wakes: its downloads time out, and are retried
        frozen.process.send_signal(signal.SIGCONT)
        wait_all([frozen], timeout_s=60)
    finally:
        web.stop()
    assert "'retry/count'" in frozen.log(), frozen.log()[-2000:]  # it did retry
    # then each page's two items are in the stream once, and no error record was written
    entries: Any = redis_server.client().xrange(JobKeys("retried").results)
    ids = Counter(decode_record(sid, fields).id for sid, fields in entries)
    assert hung and max(ids.values()) == 1, ids
    assert len(ids) == 40 and not any(rid.endswith(":error") for rid in ids)


def test_a_node_stopped_while_the_stream_is_full_spools_its_results_and_they_are_written_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a node paused at the cap of the results stream (3 pages of items, of 12); its close
    # waits for room for 15 s (CLOSE_TIMEOUT_S) before it spools
    web = site(12, links_per_page=2)
    cap = 3 * ITEMS_PER_PAGE
    first = listing_node("first", redis_server.url, web, tmp_path,
                         CLUSTERSYNC_RESULTS_MAX=str(cap))
    wait_until(lambda: "is full" in first.log(), 60, "the node to say the stream is full")
    # when it is stopped (SIGTERM) while the stream is still full
    first.process.terminate()
    assert first.wait(60) == 0, first.log()[-3000:]
    assert "the job's results stream was full at close;" in first.log()  # not "unreachable"
    [path] = list((tmp_path / "spool").rglob("*.spool"))
    spooled = msgpack.unpackb(path.read_bytes(), raw=False)
    assert "R" in {op[0] for _, ops in spooled["batches"] for op in ops}
    # and a reader reads and trims the stream before the next node starts in the same place
    client = redis_server.client()
    seen = result_ids(redis_server)
    client.xtrim(KEYS.results, maxlen=0)
    second = listing_node("second", redis_server.url, web, tmp_path)
    wait_all([second], timeout_s=120)
    # then the spool was sent, and every item was written once
    assert "spooled in" in second.log()
    seen.update(result_ids(redis_server))
    assert sum(seen.values()) == len(seen) == expected_item_count(web)
    assert missing_pages(web) == []


CLOSER = '''
    import scrapy
    from scrapy.exceptions import CloseSpider

    from example.spiders.site import SiteSpider


    class CloserSpider(SiteSpider):
        """Two items a page; on node "first", page 3 yields one, then raises CloseSpider."""

        name = "closer"

        def parse(self, response):
            yield {"page": response.url, "n": 0}
            if (response.url.endswith("/page/3.html")
                    and self.settings.get("USER_AGENT") == "first"):
                raise CloseSpider("enough")
            yield {"page": response.url, "n": 1}
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)
'''


def test_a_page_whose_callback_raised_close_spider_is_written_once_by_the_node_that_redoes_it(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a node whose callback of page 3 yields an item, then raises CloseSpider
    web = site(12, links_per_page=2)
    project = project_with_spiders(tmp_path, "closer", CLOSER)
    first = start_node("first", redis_server.url, web.start_url, tmp_path,
                       project_dir=project, spider="closer")
    wait_all([first], timeout_s=60)
    assert first.finish_reason() == "enough"
    # when another node crawls on (its callbacks run to their end)
    second = start_node("second", redis_server.url, web.start_url, tmp_path,
                        project_dir=project, spider="closer")
    wait_all([second], timeout_s=60)
    # then page 3 was handed back and crawled again, and every page's two items are in the
    # stream once: the first node's copy of page 3's first item was not written
    assert web.hits_by_agent()["second"].get("/page/3.html") == 1
    entries: Any = redis_server.client().xrange(JobKeys("closer").results)
    results = [decode_record(sid, fields) for sid, fields in entries]
    ids = Counter(result.id for result in results)
    assert max(ids.values()) == 1 and len(ids) == 2 * len(web.page_urls())


def test_redis_killed_and_restarted_from_its_aof_mid_crawl_leaves_every_item_once(
    redis_factory: Any, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a node crawling a listing site into a Redis that fsyncs every write (AOF, always)
    server: RedisServer = redis_factory(persistence=True)
    web = site(40, links_per_page=3, delay_s=0.01)
    node = listing_node("node1", server.url, web, tmp_path, CLUSTERSYNC_SOCKET_TIMEOUT="1")
    wait_until(lambda: len(web.hits()) >= 12, 60, "12 pages fetched")
    # when Redis is killed (SIGKILL) mid-crawl and started again from its AOF a second later
    server.restart(down_s=1.0, crash=True)
    wait_all([node], timeout_s=120)
    # then Redis lost nothing it had acknowledged, and every item is in the stream once
    assert node.finish_reason() == "finished", node.log()[-3000:]
    assert "reachable again" in node.log()  # it did lose Redis for a while
    ids = result_ids(server)
    assert max(ids.values()) == 1 and len(ids) == expected_item_count(web)
