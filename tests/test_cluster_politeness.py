"""One politeness budget per site for the whole cluster: real `scrapy crawl` nodes, a real
redis-server, counted from the test site's own access times."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testkit.rates import most_in_window, rate_per_s
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import ProxyFactory, SiteFactory
from support import (
    clustersync,
    missing_pages,
    pages_fetched,
    pages_fetched_twice,
    project_with_spiders,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

#: the nodes' names, which the site counts their requests by (their User-Agent)
NODES = ["node1", "node2"]


def project_with(tmp_path: Path, settings_py: str) -> Path:
    """The example project with ``settings_py`` added to its settings.py (not -s)."""
    root = project_with_spiders(tmp_path, "nothing_more", "")
    settings = root / "example" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + settings_py + "\n")
    return root


def site_times(web: TestSite) -> list[float]:
    """When the site answered each page, every node together, sorted."""
    return sorted(t for name in NODES for t in web.agent_hits(name).times)


def crawl_with_two_nodes(redis_server: RedisServer, web: TestSite, tmp_path: Path,
                         settings_py: str) -> list[float]:
    project = project_with(tmp_path, settings_py)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, None, project_dir=project)
    wait_all(nodes, timeout_s=120)
    assert [node.process.returncode for node in nodes] == [0, 0]
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)
    assert all(web.agent_hits(name).times for name in NODES)  # both nodes took part
    return site_times(web)


@pytest.mark.timing
def test_two_nodes_keep_download_delay_for_the_cluster_not_each(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> None:
    # given a project whose settings.py says DOWNLOAD_DELAY = 0.5 (not jittered: the script's
    # draws are tested on their own), and two nodes
    web = site(24)
    # when they crawl a site together
    times = crawl_with_two_nodes(redis_server, web, tmp_path,
                                 "DOWNLOAD_DELAY = 0.5\nRANDOMIZE_DOWNLOAD_DELAY = False")
    # then the site saw at most two requests a second from both together
    rate, most = rate_per_s(times), most_in_window(times, 5.0)
    print(f"\ncluster politeness: {rate:.2f} req/s over {times[-1] - times[0]:.1f}s, "
          f"at most {most} in a 5 s window; shortest gap "
          f"{min(b - a for a, b in zip(times, times[1:], strict=False)):.3f}s")
    assert 1.6 <= rate <= 2.1
    assert most <= 11  # 10 per 5 s, one more at the window's edge


@pytest.mark.timing
def test_node_politeness_keeps_the_delay_on_each_node_as_scrapy_does(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> None:
    # given the same project with CLUSTERSYNC_POLITENESS = "node" (not jittered: 20 draws of
    # Scrapy's 0.5-1.5 x make a rate of 4 +- 0.3 by chance alone)
    web = site(40)
    times = crawl_with_two_nodes(
        redis_server, web, tmp_path,
        'DOWNLOAD_DELAY = 0.5\nRANDOMIZE_DOWNLOAD_DELAY = False\nCLUSTERSYNC_POLITENESS = "node"')
    # then each node keeps its own delay: about four requests a second in all
    rate = rate_per_s(times)
    each = [rate_per_s(web.agent_hits(name).times) for name in NODES]
    spans = [(web.agent_hits(name).first, web.agent_hits(name).last) for name in NODES]
    print(f"\nnode politeness: {rate:.2f} req/s over {times[-1] - times[0]:.1f}s; each node "
          f"{each[0]:.2f} and {each[1]:.2f} req/s; spans {spans}, pauses "
          f"{[round(web.agent_hits(n).longest_pause_s, 2) for n in NODES]}")
    assert 3.6 <= rate <= 4.2


def hits_in(times: list[float], start: float, end: float) -> list[float]:
    return [t for t in times if start < t < end]


#: a request a gate let through just before the 429 reached its node still goes: every node
#: hears of a slow-down within milliseconds and drops the turns it reserved, so only those
#: requests (on their way to the site) may arrive this long after the 429
LET_THROUGH_SLACK_S = 0.1
#: a turn reserved before a 503's backoff still goes: turns are reserved this far ahead
RESERVED_AHEAD_S = 0.25
FAST_POLITE = "DOWNLOAD_DELAY = 0.2\nRANDOMIZE_DOWNLOAD_DELAY = False"


@pytest.mark.timing
def test_a_429_with_retry_after_holds_the_site_for_every_node_until_then(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> None:
    # given a site that answers one request with 429 and Retry-After: 3, after 6 pages
    web = site(30)
    web.answer_badly(6, 429, "3")
    # when two nodes crawl it
    times = crawl_with_two_nodes(redis_server, web, tmp_path, FAST_POLITE)
    # then neither node sent it a request for 3 s, but one already on its way when it came
    told = web.bad_answer_times[0]
    on_its_way = hits_in(times, told, told + LET_THROUGH_SLACK_S)
    early = hits_in(times, told + LET_THROUGH_SLACK_S, told + 2.95)
    after = min(t for t in times if t > told + LET_THROUGH_SLACK_S) - told
    print(f"\n429: next request {after:.2f}s after it; {len(early)} within the 3 s; on their way "
          f"then: {[round(t - told, 3) for t in on_its_way]}")
    assert early == [] and after < 3.5


@pytest.mark.timing
def test_a_503_without_retry_after_slows_the_site_down_for_every_node(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> None:
    # given a site that answers three requests in a row with 503 (no header), after 10 pages
    web = site(24)
    web.answer_badly(10, 503, None, times=3)
    # when two nodes crawl it at five requests a second
    times = crawl_with_two_nodes(redis_server, web, tmp_path, FAST_POLITE)
    # then the site sees far fewer requests a second after the 503s than before
    first, last = web.bad_answer_times[0], web.bad_answer_times[-1]
    before = len(hits_in(times, first - 1.5, first)) / 1.5
    after = len(hits_in(times, last + RESERVED_AHEAD_S, last + 2.0 + RESERVED_AHEAD_S)) / 2.0
    print(f"\n503: {before:.2f} req/s before, {after:.2f} req/s in the 2 s after")
    assert after <= 0.5 * before


@pytest.mark.timing
def test_a_node_killed_holding_a_sites_slot_blocks_it_no_longer_than_the_lease(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> None:
    # given two nodes sharing a site capped at one request under way for the cluster
    # (CONCURRENT_REQUESTS_PER_DOMAIN = 1 in settings.py; leases of 3 s: FAST_SETTINGS)
    web = site(20, delay_s=0.5)
    project = project_with(tmp_path, "CONCURRENT_REQUESTS_PER_DOMAIN = 1")
    one, two = start_nodes(2, redis_server.url, web.start_url, tmp_path, None,
                           project_dir=project)
    wait_until(lambda: all(len(web.agent_hits(n).times) >= 2 for n in NODES), 60,
               "both nodes to crawl")
    # when the first is killed with -9 while its request is under way (it holds the slot)
    wait_until(lambda: len(web.requests_of("node1")) > len(web.agent_hits("node1").times), 30,
               "node1 to have a request under way")
    one.kill()
    killed = time.monotonic()
    wait_all([two], timeout_s=120)
    # then the other node's next request starts once the slot's lease ended, not before, and
    # never two requests of the site were under way at once
    starts = [t - web.delay_s for t in web.agent_hits("node2").times]
    resumed = min(t for t in starts if t > killed) - killed
    under_way = [(t - web.delay_s + 0.02, t - 0.02) for t in site_times(web)]
    overlaps = sum(a_end > b_start for (_, a_end), (b_start, _) in
                   zip(under_way, under_way[1:], strict=False))
    print(f"\nkill -9 with the slot: the other node resumed {resumed:.2f}s later "
          f"(lease 3 s); {overlaps} overlapping requests")
    assert 1.0 < resumed < 3.0 + 0.7
    assert overlaps == 0
    assert missing_pages(web) == []  # the page under way when node1 died came again


def test_a_node_record_shows_the_delay_of_the_site_it_crawls(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> None:
    # given one node crawling a small site with DOWNLOAD_DELAY = 0.4
    web = site(8)
    project = project_with(tmp_path, "DOWNLOAD_DELAY = 0.4\nRANDOMIZE_DOWNLOAD_DELAY = False")
    nodes = start_nodes(1, redis_server.url, web.start_url, tmp_path, None, project_dir=project)
    seen: list[dict[str, object]] = []

    def site_in_record() -> bool:
        listed = clustersync(redis_server.url, "nodes", "site", "--json")
        records = json.loads(listed.stdout) if listed.returncode == 0 else []
        seen[:] = [s for n in records for s in (n.get("sites") or {}).get("shown", [])]
        return any(s["site"] == "127.0.0.1" for s in seen)

    # when `clustersync nodes JOB --json` is read while it crawls
    wait_until(site_in_record, timeout_s=10, what="the site in the node's record")
    wait_all(nodes, timeout_s=30)
    # then the node's record names the site with the delay in force, no backoff, no block
    [shown] = [s for s in seen if s["site"] == "127.0.0.1"]
    assert shown["delay_s"] == 0.4 and shown["backoff_s"] == 0 and shown["blocked_until"] is None
    assert pages_fetched(web) == web.pages
    # and the table of `clustersync nodes` shows it in its sites column and its --sites detail
    table = clustersync(redis_server.url, "nodes", "site", "--sites")
    assert "127.0.0.1 0.40s" in table.stdout and "busiest first" in table.stdout


@pytest.mark.timing
def test_a_node_far_from_redis_never_sends_a_sites_turns_at_once(
        redis_server: RedisServer, proxy_factory: ProxyFactory, site: SiteFactory,
        tmp_path: Path) -> None:
    # given a node 0.1 s each way from Redis, and a site paced at 0.05 s: its turns come when
    # two or three of them have started
    web = site(60)
    far_redis = proxy_factory(redis_server, delay_s=0.1)
    node = start_node("node1", far_redis.url(), web.start_url, tmp_path,
                      {"DOWNLOAD_DELAY": "0.05", "RANDOMIZE_DOWNLOAD_DELAY": "False"})
    # when it crawls the site
    wait_all([node], timeout_s=120)
    assert node.process.returncode == 0
    times = site_times(web)
    # then the site never saw more than two of its requests within 0.02 s (a turn used late and
    # the next on time), as turns sent all at once would make it
    most = most_in_window(times, 0.02)
    print(f"\nfar node: at most {most} requests within 0.02 s, {rate_per_s(times):.1f} req/s")
    assert most <= 2
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)
