"""End to end: every item of a crawl reaches the job's results stream exactly once, however
nodes die and Redis goes away (real redis-server, real `scrapy crawl` subprocesses)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest
from sink_support import database_url, rows_of

from scrapy_clustersync.results import decode_record
from scrapy_clustersync.store.keys import JobKeys
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import ProxyFactory, SiteFactory
from support import (
    ROOT,
    Node,
    clustersync,
    missing_pages,
    project_with_spiders,
    start_node,
    wait_all,
    wait_until,
)

LISTING_PROJECT = ROOT / "tests" / "projects" / "listing"
KEYS = JobKeys("listing")
ITEMS_PER_PAGE = 120
REACTORS = {
    "asyncio": {},  # Scrapy's default, the asyncio reactor
    "select": {"TWISTED_REACTOR": "twisted.internet.selectreactor.SelectReactor"},
}


def listing_node(name: str, redis_url: str, web: TestSite, workdir: Path,
                 **settings: str) -> Node:
    given = {"ITEMS_PER_PAGE": str(ITEMS_PER_PAGE), "PIPELINE_DELAY": "0", **settings}
    return start_node(name, redis_url, web.start_url, workdir, given,
                      project_dir=LISTING_PROJECT, spider="listing")


def result_ids(server: RedisServer) -> Counter[str]:
    """How often each result id is in the job's stream (each item result checked readable)."""
    entries: Any = server.client().xrange(KEYS.results)
    return Counter(decode_record(sid, fields).id for sid, fields in entries)


def expected_item_count(web: TestSite) -> int:
    return len(web.page_paths()) * ITEMS_PER_PAGE


def scraped_count(node: Node) -> int:
    """The item_scraped_count of the node's final stats."""
    for line in node.log().splitlines():
        if "'item_scraped_count':" in line:
            return int(line.split("'item_scraped_count':")[1].strip(" ,}"))
    return 0


@pytest.mark.parametrize("reactor", sorted(REACTORS))
def test_every_item_of_a_crawl_is_in_the_stream_once_as_many_as_plain_scrapy_scrapes(
    reactor: str, redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a listing site of 30 pages (120 items each), crawled by plain Scrapy first
    web = site(30, links_per_page=3)
    vanilla = listing_node("vanilla", redis_server.url, web, tmp_path / "v", ADDONS="{}",
                           **REACTORS[reactor])
    wait_all([vanilla])
    # when one node crawls it with the add-on
    node = listing_node("node1", redis_server.url, web, tmp_path, **REACTORS[reactor])
    wait_all([node])
    # then the stream holds each item once, as many as plain Scrapy scraped
    ids = result_ids(redis_server)
    assert missing_pages(web) == []
    assert sum(ids.values()) == len(ids) == scraped_count(vanilla) == expected_item_count(web)
    entries: Any = redis_server.client().xrange(KEYS.results, count=1)
    first = decode_record(*entries[0])
    assert first.kind == "item" and first.spider == "listing" and first.url
    assert set(first.data) == {"page", "position", "title"}
    assert json.dumps(first.data)


def items_in_stream(server: RedisServer) -> Counter[tuple[str, int]]:
    """How often each (page, position) item is in the job's stream."""
    entries: Any = server.client().xrange(KEYS.results)
    found: Counter[tuple[str, int]] = Counter()
    for sid, fields in entries:
        result = decode_record(sid, fields)
        if result.kind == "item":
            found[(result.data["page"], result.data["position"])] += 1
    return found


def expected_items(web: TestSite) -> set[tuple[str, int]]:
    return {(url, position) for url in web.page_urls() for position in range(ITEMS_PER_PAGE)}


def exported_items(redis_url: str) -> Counter[tuple[str, int]]:
    """How often each (page, position) item is in ``clustersync export listing``'s output (the
    real command), each line checked to be one JSON result."""
    run = clustersync(redis_url, "export", "listing", "--kinds", "item")
    assert run.returncode == 0, run.output
    found: Counter[tuple[str, int]] = Counter()
    for line in run.stdout.splitlines():
        result = json.loads(line)
        found[(result["item"]["page"], result["item"]["position"])] += 1
    return found


def test_two_nodes_one_killed_and_restarted_leave_every_item_once_in_export_and_a_table(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two nodes crawling a listing site of 80 pages through a slow item pipeline
    web = site(80, links_per_page=3, delay_s=0.01)
    nodes = [listing_node(name, redis_server.url, web, tmp_path / name, PIPELINE_DELAY="0.002")
             for name in ("first", "second")]
    wait_until(lambda: len(web.hits()) >= 25, 60, "25 pages fetched")
    # when the first is killed with SIGKILL mid-crawl, and started again in its place
    nodes[0].kill()
    again = listing_node("first", redis_server.url, web, tmp_path / "first",
                         PIPELINE_DELAY="0.002")
    wait_all([nodes[1], again], timeout_s=120)
    # then every item is in the stream, each once, and each id once
    found = items_in_stream(redis_server)
    assert set(found) == expected_items(web)
    assert max(found.values()) == 1
    assert max(result_ids(redis_server).values()) == 1
    # and `clustersync export` writes each once
    exported = exported_items(redis_server.url)
    assert set(exported) == expected_items(web) and max(exported.values()) == 1
    # and a PostgreSQL sink's table holds one row per item
    databases = database_url("postgresql", tmp_path)
    url = next(databases)
    try:
        run = clustersync(redis_server.url, "sink", "listing", "--to", url, "--json")
        assert run.returncode == 0, run.output
        rows = rows_of(url, "listing", "id, item")
    finally:
        databases.close()
    assert len(rows) == len({row[0] for row in rows}) == expected_item_count(web)
    items: list[Any] = [item for _, item in rows]
    assert {(item["page"], item["position"]) for item in items} == expected_items(web)


def test_redis_away_for_seconds_mid_crawl_loses_and_repeats_no_result(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path,
) -> None:
    # given a node crawling through a proxy to Redis
    proxy = proxy_factory(redis_server)
    web = site(60, links_per_page=3, delay_s=0.01)
    node = listing_node("node1", proxy.url(), web, tmp_path, CLUSTERSYNC_SOCKET_TIMEOUT="1")
    wait_until(lambda: len(web.hits()) >= 15, 60, "15 pages fetched")
    # when Redis is cut off for a few seconds, then back
    proxy.cut(blackhole=True)
    wait_until(lambda: "is unreachable" in node.log(), 20, "the node to notice")
    time.sleep(2)
    proxy.restore()
    wait_all([node], timeout_s=120)
    # then every item is in the stream once
    found = items_in_stream(redis_server)
    assert set(found) == expected_items(web) and max(found.values()) == 1
    assert "reachable again" in node.log()


def test_at_the_cap_the_crawl_pauses_and_goes_on_when_the_stream_is_trimmed(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a node whose job's stream holds 5 pages of items at most, on a site of 20
    web = site(20, links_per_page=2)
    cap = 5 * ITEMS_PER_PAGE
    node = listing_node("node1", redis_server.url, web, tmp_path,
                        CLUSTERSYNC_RESULTS_MAX=str(cap))
    client = redis_server.client()
    seen: Counter[str] = Counter()
    paused_at = None
    # when a reader trims the stream each time it is full, after reading it
    deadline = time.monotonic() + 120
    while node.process.poll() is None and time.monotonic() < deadline:
        if client.xlen(KEYS.results) < cap:
            time.sleep(0.05)
            continue
        if paused_at is None:  # full: the crawl stands still until the stream is trimmed
            wait_until(lambda: "is full" in node.log(), 20, "the node to say the stream is full")
            paused_at = len(web.hits())
            time.sleep(1.0)
            assert len(web.hits()) <= paused_at + 16  # at most what was under way
            status = clustersync(redis_server.url, "status", "listing")
            assert f"of {cap:,} (cap)" in status.stdout and "results full since" in status.stdout
            wait_until(lambda: "results full" in clustersync(
                redis_server.url, "nodes", "listing").stdout, 10, "the node's state")
        entries: Any = client.xrange(KEYS.results)
        seen.update(decode_record(sid, fields).id for sid, fields in entries)
        last_ms, last_seq = entries[-1][0].decode().split("-")
        client.xtrim(KEYS.results, minid=f"{last_ms}-{int(last_seq) + 1}")
    wait_all([node], timeout_s=30)
    entries = client.xrange(KEYS.results)
    seen.update(decode_record(sid, fields).id for sid, fields in entries)
    # then the crawl paused, said so, went on, and every item was written once
    assert paused_at is not None and "has room again" in node.log()
    assert sum(seen.values()) == len(seen) == expected_item_count(web)
    assert missing_pages(web) == []


SHAPES = '''
    import scrapy
    from scrapy.exceptions import DropItem

    from example.spiders.site import SiteSpider


    class ShapesSpider(SiteSpider):
        """Items of every origin: start(), a callback, an errback; one too large, one dropped."""

        name = "shapes"

        async def start(self):
            yield {"from": "start", "n": 0}
            yield {"from": "start", "n": 1}
            async for each in super().start():
                yield each

        def parse(self, response):
            big = "x" * 5000 if response.url.endswith("/page/0.html") else ""
            yield {"page": response.url, "big": big}
            yield {"page": response.url, "drop": True}
            yield scrapy.Request(response.urljoin("/missing.html"), callback=self.parse,
                                 errback=self.failed)
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

        def failed(self, failure):
            yield {"errback": failure.request.url}


    class DropPipeline:
        def process_item(self, item):
            if item.get("drop"):
                raise DropItem("dropped on purpose")
            return item
'''


def test_items_of_every_origin_are_written_and_a_too_large_one_is_refused_in_one_line(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a spider whose start() yields two items, whose pages each yield an item and one a
    # pipeline drops, page 0's item too large, and a link to a missing page with an errback
    project = project_with_spiders(tmp_path, "shapes", SHAPES)
    web = site(10, links_per_page=2)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, {
        "ITEM_PIPELINES": '{"example.spiders.shapes.DropPipeline": 300}',
        "CLUSTERSYNC_RESULT_MAX_BYTES": "1024"}, project_dir=project, spider="shapes")
    # when it crawls the site
    wait_all([node])
    # then the crawl finished, the too large item was refused in one error line naming the
    # spider, the page and the field, and counted
    assert node.finish_reason() == "finished"
    refusals = [line for line in node.log().splitlines() if "CLUSTERSYNC_RESULT_MAX_BYTES" in line]
    assert len(refusals) == 1 and "ERROR" in refusals[0], refusals
    assert "'shapes'" in refusals[0] and web.page_url(0) in refusals[0] and "'big'" in refusals[0]
    assert "'clustersync/results/refused_too_big': 1" in node.log()
    # and the stream holds the start() items, one item per other page (none dropped), the
    # missing page's error record and its errback's item, each once
    entries: Any = redis_server.client().xrange(JobKeys("shapes").results)
    results = [decode_record(sid, fields) for sid, fields in entries]
    ids = Counter(result.id for result in results)
    assert max(ids.values()) == 1
    assert {"start:0", "start:1"} <= set(ids)
    pages = sorted(r.data["page"] for r in results if r.kind == "item" and "page" in r.data)
    assert pages == sorted(set(web.page_urls()) - {web.page_url(0)})
    assert not any(r.data.get("drop") for r in results)
    [error] = [r for r in results if r.kind == "error"]
    assert error.url and error.url.endswith("/missing.html") and error.data["status"] == 404
    [errback] = [r for r in results if r.kind == "item" and "errback" in r.data]
    assert errback.id.split(":")[0] == error.id.split(":")[0]


def test_results_a_node_spooled_at_close_are_written_once_by_the_next_node(
    redis_server: RedisServer, site: SiteFactory, proxy_factory: ProxyFactory, tmp_path: Path,
) -> None:
    # given a node crawling through a proxy to Redis
    proxy = proxy_factory(redis_server)
    web = site(60, links_per_page=3, delay_s=0.01)
    first = listing_node("first", proxy.url(), web, tmp_path, CLUSTERSYNC_SOCKET_TIMEOUT="1")
    wait_until(lambda: len(web.hits()) >= 15, 60, "15 pages fetched")
    # when Redis becomes unreachable and the node is stopped (SIGTERM) before it comes back
    proxy.cut()
    wait_until(lambda: "is unreachable" in first.log(), 20, "the node to notice")
    time.sleep(0.5)
    first.process.terminate()
    assert first.wait(60) == 0 and "writes are kept in" in first.log()
    [path] = list((tmp_path / "spool").rglob("*.spool"))
    spooled = msgpack.unpackb(path.read_bytes(), raw=False)
    assert "R" in {op[0] for _, ops in spooled["batches"] for op in ops}
    proxy.restore()
    # then the next node started in the same place sends them, and every item is in the
    # stream once
    second = listing_node("second", redis_server.url, web, tmp_path)
    wait_all([second], timeout_s=120)
    assert "spooled in" in second.log()
    found = items_in_stream(redis_server)
    assert set(found) == expected_items(web) and max(found.values()) == 1
