"""The broad-crawl web of bench/broad.py (testkit/web.py) and the rates it is judged by."""

from __future__ import annotations

import re
from collections import deque

import pytest

from testkit.rates import rate_between, steady_window
from testkit.web import HEAVY, BroadWeb, Web, loopback_host

HREF_RE = re.compile(r'href="http://([0-9.]+):0/page/(\d+)\.html"')


def test_four_links_of_five_point_at_the_heavy_site_spread_among_the_others() -> None:
    # given the bench's web with its heavy site
    plan = BroadWeb()
    pages = [(site, page) for site in plan.sites for page in range(100)]
    links = [plan.links_of(site, page) for site, page in pages]
    # then 80% of all links are heavy, and a crawler reading links in order meets heavy ones
    # everywhere: first and last links are heavy about 80% of the time too, not always or never
    heavy = sum(target == HEAVY for page in links for target, _ in page)
    assert heavy / sum(len(page) for page in links) == pytest.approx(plan.heavy_share) == 0.8
    for position in (0, -1):
        share = sum(page[position][0] == HEAVY for page in links) / len(links)
        assert 0.7 <= share <= 0.9


def test_the_light_sites_are_the_same_without_the_heavy_site_but_its_links() -> None:
    # given the web with and without its heavy site
    with_heavy, without = BroadWeb(), BroadWeb(with_heavy=False)
    # then the same light sites are served, and each light page keeps its light links in order
    assert without.sites == with_heavy.light == list(range(1, 20))
    for site in with_heavy.light:
        for page in range(0, with_heavy.light_pages, 7):
            kept = [link for link in with_heavy.links_of(site, page) if link[0] != HEAVY]
            assert kept == without.links_of(site, page)
            assert all(target != HEAVY for target, _ in without.links_of(site, page))


def test_every_light_page_is_reachable_from_the_start_page_without_the_heavy_site() -> None:
    # given the web without its heavy site (its links cannot help)
    plan = BroadWeb(with_heavy=False)
    # when every link is followed from page 0 of the first light site
    seen = {(plan.light[0], 0)}
    queue = deque(seen)
    while queue:
        for link in plan.links_of(*queue.popleft()):
            if link not in seen:
                seen.add(link)
                queue.append(link)
    # then every page of every light site is found
    assert len(seen) == len(plan.light) * plan.light_pages


def test_each_site_serves_on_its_own_loopback_address_and_links_by_absolute_url() -> None:
    # given a small web, not started (ports are 0 until it is)
    web = Web(BroadWeb(light_sites=3, light_pages=10))
    # then each site has its own address, the heavy one first
    assert [site.host for site in web.sites.values()] == [
        "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
    assert web.start_url == "http://127.0.0.3:0/page/0.html"
    # and a page's links are the plan's, each to its site's address
    body = web.sites[2].page_body(4).decode()
    found = [(host, int(page)) for host, page in HREF_RE.findall(body)]
    assert found == [(loopback_host(site), page) for site, page in web.plan.links_of(2, 4)]


def test_the_steady_window_leaves_out_the_warm_up_and_the_tail_of_a_crawl_that_ended() -> None:
    # given a crawl of 100 pages, one every 0.1 s from t=10, its last 10 pages late
    times = [10 + i / 10 for i in range(90)] + [30 + i for i in range(10)]
    # then a crawl that ended is read from 3 s in to its 90th-percentile page, at 10 pages/s
    window = steady_window(times, 10.0, 3.0, cut_at=None)
    assert window == (13.0, 30.0)
    assert rate_between(times, 13.0, 18.0) == pytest.approx(51 / 5)
    # and a crawl cut at t=15 is read up to the cut
    assert steady_window(times, 10.0, 3.0, cut_at=15.0) == (13.0, 15.0)
    # and a crawl that fetched nothing after its warm-up has no window
    assert steady_window(times[:5], 10.0, 3.0, cut_at=None) is None
