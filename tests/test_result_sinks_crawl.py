"""End to end: a real crawl whose results stream is capped far below its items, read by a
sink into SQLite while it runs: the sink's trimming lets the crawl go on, and once the job has
ended the sink exits 0 with every item in the table once."""

from __future__ import annotations

from pathlib import Path

from results_support import cli_process
from sink_support import rows_of
from test_results_crawl import ITEMS_PER_PAGE, KEYS, expected_item_count, listing_node

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import missing_pages, wait_all, wait_until


def test_a_sink_beside_a_capped_crawl_ends_with_every_item_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a crawl of 20 pages of 120 items whose stream holds 3 pages of items at most
    web = site(20, links_per_page=2)
    node = listing_node("node1", redis_server.url, web, tmp_path,
                        CLUSTERSYNC_RESULTS_MAX=str(3 * ITEMS_PER_PAGE))
    client = redis_server.client()
    wait_until(lambda: bool(client.exists(KEYS.meta)), 60, "the node to create the job")
    # when a sink reads it into SQLite while it runs
    url = f"sqlite:///{tmp_path / 'items.db'}"
    sink = cli_process(redis_server.url, "sink", "listing", "--to", url, "--batch", "200")
    try:
        wait_all([node], timeout_s=120)
        _, err = sink.communicate(timeout=120)
    finally:
        sink.kill()
    # then the crawl went through, and the sink ended with every item in the table once
    assert sink.returncode == 0, err.decode()
    assert missing_pages(web) == []
    rows = rows_of(url, "listing")
    assert len(rows) == len(set(rows)) == expected_item_count(web)
    assert client.xlen(KEYS.results) == 0
