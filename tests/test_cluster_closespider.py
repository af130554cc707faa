"""CLOSESPIDER_* count for the whole cluster: real `scrapy crawl` nodes, a real redis-server, and
the test site's own count of what it served."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    clustersync,
    pages_fetched,
    project_with_spiders,
    start_nodes,
    wait_all,
    wait_until,
)

JOB = "site"
META = f"clustersync:{{{JOB}}}:meta"
#: an error raised by every callback, after its links are followed
FAILING_SPIDER = """
    from example.spiders.site import SiteSpider


    class FailingSpider(SiteSpider):
        name = "site_fails"

        def parse(self, response):
            yield from super().parse(response)
            raise ValueError("a callback that fails")
"""


def stopped_with(server: RedisServer, job: str = JOB) -> tuple[bytes | None, bytes | None]:
    """The job's control state and the reason a limit stopped it."""
    control, reason = server.client().hmget(f"clustersync:{{{job}}}:meta",
                                            ["control", "stop_reason"])
    assert not isinstance(control, str) and not isinstance(reason, str)
    return control, reason


def test_two_nodes_fetch_no_more_than_the_page_limit_and_both_close_with_its_reason(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # Given two nodes with CLOSESPIDER_PAGECOUNT = 50 on a site of 400 pages
    web = site(400, delay_s=0.01)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {"CLOSESPIDER_PAGECOUNT": "50"})
    # When they crawl
    wait_all(nodes, 90)
    # Then the site served exactly 50 pages (page tickets: no request beyond the limit)
    served = pages_fetched(web)
    print(f"\npagecount 50, two nodes: the site served {served} pages, "
          f"{[sum(web.agent_hits(node.name).hits.values()) for node in nodes]} per node")
    assert served == 50
    # and both nodes closed with Scrapy's reason and exit code 0
    for node in nodes:
        assert node.finish_reason() == "closespider_pagecount", node.log()[-3000:]
        assert node.process.returncode == 0
    # and the job is stopped with that reason, which status shows
    assert stopped_with(redis_server) == (b"stopped", b"closespider_pagecount")
    shown = clustersync(redis_server.url, "status", JOB)
    assert "closespider_pagecount" in shown.stdout, shown.stdout


@pytest.mark.parametrize(("setting", "spider", "reason"), [
    ("CLOSESPIDER_ITEMCOUNT", "site", "closespider_itemcount"),
    ("CLOSESPIDER_ERRORCOUNT", "site_fails", "closespider_errorcount"),
])
def test_items_and_errors_of_two_nodes_add_up_to_one_limit(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path, setting: str, spider: str,
    reason: str,
) -> None:
    # Given two nodes with a limit of 30 items (or callback errors) on a site of 400 pages
    web = site(400, delay_s=0.05)
    project = project_with_spiders(tmp_path, "fails", FAILING_SPIDER)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {setting: "30", "CONCURRENT_REQUESTS": "4"}, project_dir=project,
                        spider=spider)
    # When they crawl
    wait_all(nodes, 90)
    # Then the job stopped near 30 pages for the cluster: 30 plus what was under way (two
    # nodes of 4 concurrent requests) and what they started in the few tenths of a second the
    # count and the stop take to travel (at most 8 requests per 0.05 s of the site's delay)
    served = pages_fetched(web)
    print(f"\n{setting} 30, two nodes: the site served {served} pages")
    assert 30 <= served <= 30 + 2 * 4 + 24
    for node in nodes:
        assert node.finish_reason() == reason, node.log()[-3000:]
    assert stopped_with(redis_server, spider) == (b"stopped", reason.encode())


def test_with_node_politeness_each_node_counts_its_own_pages_as_scrapy_does(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # Given two nodes with CLUSTERSYNC_POLITENESS = "node" and CLOSESPIDER_PAGECOUNT = 20
    web = site(400, delay_s=0.01)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {"CLOSESPIDER_PAGECOUNT": "20", "CLUSTERSYNC_POLITENESS": "node"})
    # When they crawl
    wait_all(nodes, 90)
    # Then each node fetched its own 20 and more, closed by Scrapy's own CloseSpider
    for node in nodes:
        assert node.finish_reason() == "closespider_pagecount", node.log()[-3000:]
        assert sum(web.agent_hits(node.name).hits.values()) >= 20
    # and no limit stopped the job for the cluster
    assert stopped_with(redis_server)[1] is None


@pytest.mark.timing
def test_a_timeout_closes_every_node_from_the_jobs_start(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # Given two nodes with CLOSESPIDER_TIMEOUT = 2 on a slow site they cannot finish in time
    web = site(2000, delay_s=0.05)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {"CLOSESPIDER_TIMEOUT": "2", "CONCURRENT_REQUESTS": "2"})
    # When they crawl
    wait_all(nodes, 60)
    # Then both closed with closespider_timeout, the job stopped for it, the site half crawled
    for node in nodes:
        assert node.finish_reason() == "closespider_timeout", node.log()[-3000:]
    assert stopped_with(redis_server) == (b"stopped", b"closespider_timeout")
    assert pages_fetched(web) < 2000


@pytest.mark.timing
def test_a_page_limit_set_while_the_cluster_crawls_stops_it_that_many_pages_later(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # Given two nodes crawling a slow site of 1000 pages without a limit
    web = site(1000, delay_s=0.1)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {"CONCURRENT_REQUESTS": "2"})
    started = time.monotonic()
    wait_until(lambda: pages_fetched(web) >= 20, 30, "the crawl to start")
    rate = pages_fetched(web) / (time.monotonic() - started)  # pages/s of the cluster
    # When CLOSESPIDER_PAGECOUNT = 30 is set as a shared setting
    answer = clustersync(redis_server.url, "config", "set", JOB, "CLOSESPIDER_PAGECOUNT",
                         "30")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    before = pages_fetched(web)
    wait_all(nodes, 60)
    # Then the cluster counted 30 responses from when its nodes applied the limit, and the few
    # under way then without a ticket (2 per node); it fetched no more than those and what it
    # fetched before the change reached every node (within a second: not counted)
    counted = int(redis_server.client().hget(f"clustersync:{{{JOB}}}:closespider", "pages") or 0)
    after = pages_fetched(web) - before
    print(f"\nlive pagecount 30: {after} pages after the change, {counted} counted, "
          f"{rate:.0f} pages/s before")
    assert 30 <= counted <= 30 + 2 * 2
    assert after <= 30 + rate * 1.0
    for node in nodes:
        assert node.finish_reason() == "closespider_pagecount", node.log()[-3000:]
    assert stopped_with(redis_server) == (b"stopped", b"closespider_pagecount")
