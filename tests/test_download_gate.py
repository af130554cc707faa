"""The download gate: with Scrapy's template politeness (one request at a time per site, a
delay between requests), `clustersync pause` and `stop` also hold the requests a node had
already handed to Scrapy's downloader, measured from the test site's own access log (real
`scrapy crawl` nodes, the real CLI, a real redis-server)."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import SiteFactory
from support import (
    Node,
    clustersync,
    pages_fetched,
    pages_fetched_twice,
    start_nodes,
    wait_all,
    wait_until,
)

JOB = "site"
#: Scrapy's project template (one request at a time per site, one a second), at twice its pace
POLITE = {"DOWNLOAD_DELAY": "0.5", "CONCURRENT_REQUESTS_PER_DOMAIN": "1",
          # a small lease ahead, so that both nodes get pages of this small site to hold
          "CLUSTERSYNC_PREFETCH": "2",
          # log times to the millisecond: when each node closed is read from its log
          "LOG_FORMAT": "%(asctime)s.%(msecs)03d [%(name)s] %(levelname)s: %(message)s"}
#: how long the test watches the site after a pause for a request that should not come
QUIET_WATCH_S = 4.0


def hits_between(web: TestSite, agents: list[str], start: float, end: float) -> list[float]:
    """The site's times (``time.monotonic()``) of the pages ``agents`` fetched in the window."""
    return sorted(t for agent in agents for t in web.agent_hits(agent).times if start < t < end)


def closed_at(node: Node) -> float:
    """When ``node`` logged "Spider closed", on ``time.time()``'s clock."""
    for line in node.log().splitlines():
        if "Spider closed" in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    raise AssertionError(f"{node.name} never closed:\n{node.log()[-2000:]}")


def status(url: str) -> dict[str, Any]:
    answer = clustersync(url, "status", JOB, "--json")
    assert answer.returncode == 0, answer.stderr
    result: dict[str, Any] = json.loads(answer.stdout)
    return result


def two_polite_nodes_crawling(redis_server: RedisServer, site: SiteFactory, tmp_path: Path
                              ) -> tuple[TestSite, list[Node], list[str]]:
    """Two nodes crawling a 30-page site with Scrapy's template politeness (two pages a second
    for the whole cluster), each a few pages in."""
    web = site(30)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, POLITE)
    names = [node.name for node in nodes]
    wait_until(lambda: all(len(web.agent_hits(n).times) >= 3 for n in names), 60,
               "both nodes to crawl a few pages")
    return web, nodes, names


@pytest.mark.timing
def test_pause_holds_the_requests_already_in_scrapys_downloader_and_resume_fetches_them_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a site with Scrapy's template politeness
    web, nodes, names = two_polite_nodes_crawling(redis_server, site, tmp_path)
    # when the job is paused
    paused = clustersync(redis_server.url, "pause", JOB)
    returned = time.monotonic()
    assert paused.returncode == 0, paused.stderr
    time.sleep(QUIET_WATCH_S + 1.0)
    before_resume = pages_fetched(web)
    # then from 1 s after the pause returned until the resume the site sees no request
    late = hits_between(web, names, returned + 1.0, time.monotonic())
    last = max(web.agent_hits(n).last or 0.0 for n in names)
    print(f"\npause: last request {last - returned:+.3f}s after the CLI returned; "
          f"{len(late)} requests later than 1 s; {before_resume} of {web.pages} pages fetched")
    assert late == []
    assert before_resume < web.pages and all(node.process.poll() is None for node in nodes)
    # when it is resumed
    resumed = clustersync(redis_server.url, "resume", JOB)
    assert resumed.returncode == 0, resumed.stderr
    # then the crawl goes on and every page is fetched exactly once
    wait_all(nodes, timeout_s=90)
    assert [node.process.returncode for node in nodes] == [0, 0]
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)


@pytest.mark.timing
def test_stop_downloads_nothing_held_closes_the_nodes_at_once_and_a_later_run_fetches_the_rest(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a site with Scrapy's template politeness
    web, nodes, names = two_polite_nodes_crawling(redis_server, site, tmp_path)
    # when the job is stopped
    stopped = clustersync(redis_server.url, "stop", JOB)
    returned, returned_wall = time.monotonic(), time.time()
    assert stopped.returncode == 0, stopped.stderr
    wait_until(lambda: all(node.process.poll() is not None for node in nodes), 30,
               "both nodes to exit")
    exited_s = time.monotonic() - returned
    closed_s = max(closed_at(node) for node in nodes) - returned_wall
    closed = {node.name: node.finish_reason() for node in nodes}
    first_run = pages_fetched(web)
    # then the site sees no request from 1 s after the stop returned, and both nodes closed
    # (clustersync_stopped) within 2 s, the requests they held handed back to the queue
    late = hits_between(web, names, returned + 1.0, time.monotonic())
    report = status(redis_server.url)
    print(f"\nstop: nodes closed {closed_s:.2f}s and exited {exited_s:.2f}s after the CLI "
          f"returned; {len(late)} requests later than 1 s; {first_run} of {web.pages} pages "
          f"fetched; {report['queued']} queued, {report['leased']} leased")
    assert late == []
    assert closed == dict.fromkeys(names, "clustersync_stopped")
    assert closed_s < 2.0 and exited_s < 5.0
    assert report["leased"] == 0 and report["queued"] > 0 and first_run < web.pages
    assert any("went back to the job's queue" in node.log() for node in nodes)
    # when the job is resumed and crawled again
    assert clustersync(redis_server.url, "resume", JOB).returncode == 0
    later = start_nodes(2, redis_server.url, web.start_url, tmp_path / "later", None)
    wait_all(later, timeout_s=60)
    # then the later run fetched every remaining page, and no page was fetched twice
    assert [node.process.returncode for node in later] == [0, 0]
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)


def test_a_paused_node_told_to_shut_down_hands_back_what_it_held_and_exits(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node holding requests at its gate while the job is paused (its own politeness:
    # with the cluster's, a lease hands a lone node no more than it can start before its next
    # lease, and it may hold nothing when the pause comes)
    web = site(40)
    (node,) = start_nodes(1, redis_server.url, web.start_url, tmp_path,
                          {**POLITE, "CLUSTERSYNC_POLITENESS": "node"})
    wait_until(lambda: len(web.agent_hits(node.name).times) >= 3, 60, "the node to crawl")
    assert clustersync(redis_server.url, "pause", JOB).returncode == 0
    wait_until(lambda: "is paused" in node.log(), 30, "the node to apply the pause")
    # when it is told to shut down (SIGTERM, as a service manager does)
    node.process.send_signal(signal.SIGTERM)
    node.wait(30)
    # then it closed without waiting for a resume, and its held requests went back to the queue
    assert node.finish_reason() == "shutdown"
    assert "went back to the job's queue" in node.log()
    report = status(redis_server.url)
    assert report["leased"] == 0 and report["queued"] > 0
    # and once the job runs again a later node fetches every remaining page, none twice
    assert clustersync(redis_server.url, "resume", JOB).returncode == 0
    later = start_nodes(1, redis_server.url, web.start_url, tmp_path / "later", None)
    wait_all(later, timeout_s=60)
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)
