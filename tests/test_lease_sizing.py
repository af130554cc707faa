"""A node leases what it can start before its next lease, not a fixed batch (node/lease_sizing.py).

Scrapy's project template crawls politely: one request at a time per site, a delay between
them. A node that leased a fixed batch then held far more than it could fetch for many
seconds, while the other nodes had nothing to do.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import missing_pages, pages_fetched_twice, start_nodes, wait_all, wait_until

POLITE = {"CONCURRENT_REQUESTS_PER_DOMAIN": "1", "DOWNLOAD_DELAY": "0.5"}


@pytest.mark.timing
def test_three_polite_nodes_started_together_all_fetch_pages_within_three_seconds(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a site crawled one request at a time, half a second apart (for the whole
    # cluster: two pages a second in all), and three nodes started together
    web = site(30)
    nodes = start_nodes(3, redis_server.url, web.start_url, tmp_path, settings=POLITE)
    # when all three have joined the job (a busy machine starts them seconds apart)
    wait_until(lambda: all("joined job" in node.log() for node in nodes), 60, "nodes joined")
    joined = time.monotonic()
    wait_all(nodes, timeout_s=180)
    # then each of them fetched a page within 3 s: the first did not lease everything it
    # could see while the cluster can fetch two pages a second
    firsts = {node.name: web.agent_hits(node.name).first for node in nodes}
    late = {name: None if first is None else round(first - joined, 2)
            for name, first in firsts.items() if first is None or first - joined > 3.0}
    assert late == {}, (late, {node.name: node.log()[-1500:] for node in nodes})
    # and every page was fetched once
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}


def test_a_fixed_prefetch_leaves_a_small_polite_site_to_both_nodes(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes that lease 2 requests ahead, on a small polite site (one request at a time
    # for the cluster): the engine of the first takes every request it is handed, to hold them
    # at the download gate for their turns
    web = site(12)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        settings={**POLITE, "CLUSTERSYNC_PREFETCH": "2"})
    # when they crawl it
    wait_all(nodes, timeout_s=90)
    # then each fetched a share of it (the first did not lease the whole queue, two at a time,
    # while the second found it empty), and every page once
    shares = {node.name: len(web.agent_hits(node.name).times) for node in nodes}
    assert all(share >= 3 for share in shares.values()), shares
    assert missing_pages(web) == [] and pages_fetched_twice(web) == {}
