"""End to end: every item of a crawl reaches the job's results stream exactly once, however
nodes die and Redis goes away (real redis-server, real `scrapy crawl` subprocesses)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from scrapy_clustersync.results import decode_record
from scrapy_clustersync.store.keys import JobKeys
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import SiteFactory
from support import ROOT, Node, missing_pages, start_node, wait_all

LISTING_PROJECT = ROOT / "tests" / "projects" / "listing"
KEYS = JobKeys("listing")
ITEMS_PER_PAGE = 120


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


def test_every_item_of_a_crawl_is_in_the_stream_once_as_many_as_plain_scrapy_scrapes(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a listing site of 30 pages (120 items each), crawled by plain Scrapy first
    web = site(30, links_per_page=3)
    vanilla = listing_node("vanilla", redis_server.url, web, tmp_path / "v", ADDONS="{}")
    wait_all([vanilla])
    # when one node crawls it with the add-on
    node = listing_node("node1", redis_server.url, web, tmp_path)
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
