"""End to end: a real crawl whose results stream is capped far below its items, with a reader
group registered and no reader running: the nodes stop at the cap and `clustersync status`
names the group that holds them back; once a sink of that group starts, its trimming lets the
crawl go on, and once the job has ended the sink exits 0 with every item in the table once."""

from __future__ import annotations

import json
from pathlib import Path

from results_support import cli_process
from sink_support import rows_of
from test_results_crawl import ITEMS_PER_PAGE, KEYS, expected_item_count, listing_node

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import clustersync, missing_pages, wait_all, wait_until


def test_a_registered_group_with_no_reader_holds_the_crawl_at_the_cap_until_a_sink_reads(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a crawl of 20 pages of 120 items whose stream holds 3 pages of items at most, and
    # a reader group registered for it that nothing reads yet
    web = site(20, links_per_page=2)
    cap = 3 * ITEMS_PER_PAGE
    node = listing_node("node1", redis_server.url, web, tmp_path,
                        CLUSTERSYNC_RESULTS_MAX=str(cap))
    client = redis_server.client()
    wait_until(lambda: bool(client.exists(KEYS.meta)), 60, "the node to create the job")
    added = clustersync(redis_server.url, "readers", "listing", "--add", "keeper")
    assert added.returncode == 0 and "registered reader group 'keeper'" in added.stdout
    # when the stream fills up
    wait_until(lambda: "is full" in node.log(), 60, "the node to say the stream is full")
    # then the crawl stands still short of the site, and status says why and who holds it back
    assert client.xlen(KEYS.results) == cap and missing_pages(web)
    status = clustersync(redis_server.url, "status", "listing")
    assert "results full since" in status.stdout
    assert "held back by reader group(s) 'keeper'" in status.stdout, status.stdout
    report = json.loads(clustersync(redis_server.url, "status", "listing", "--json").stdout)
    assert report["results"]["full_since_ms"] > 0
    assert report["results"]["held_back_by"] == ["keeper"]
    [group] = report["readers"]["groups"]
    assert group["group"] == "keeper" and group["lag"] == cap
    # when a sink of that group starts
    url = f"sqlite:///{tmp_path / 'items.db'}"
    sink = cli_process(redis_server.url, "sink", "listing", "--to", url, "--group", "keeper",
                       "--batch", "200")
    try:
        wait_all([node], timeout_s=120)
        _, err = sink.communicate(timeout=120)
    finally:
        sink.kill()
    # then the crawl went through, and the sink ended with every item in the table once
    assert sink.returncode == 0, err.decode()
    assert missing_pages(web) == [] and "has room again" in node.log()
    rows = rows_of(url, "listing")
    assert len(rows) == len(set(rows)) == expected_item_count(web)
    assert client.xlen(KEYS.results) == 0
