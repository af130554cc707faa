"""The broad-crawl web of bench/broad.py (testkit/web.py) and the rates it is judged by."""

from __future__ import annotations

import re
import statistics
from collections import Counter, deque
from dataclasses import replace

import pytest

from testkit.rates import growth_between, rate_between, steady_window
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
    # given the web with its heavy site and without it, its links removed
    with_heavy, without = BroadWeb(), BroadWeb(with_heavy=False, without="removed")
    # then the same light sites are served, and each light page keeps its light links in order
    assert without.sites == with_heavy.light == list(range(1, 20))
    for site in with_heavy.light:
        for page in range(0, with_heavy.light_pages, 7):
            kept = [link for link in with_heavy.links_of(site, page) if link[0] != HEAVY]
            assert kept == without.links_of(site, page)
            assert all(target != HEAVY for target, _ in without.links_of(site, page))


def test_redirected_heavy_links_point_at_the_pages_own_light_links_in_their_places() -> None:
    # given the web with its heavy site and without it, its links redirected (the default)
    with_heavy, without = BroadWeb(), BroadWeb(with_heavy=False)
    for site in with_heavy.light:
        for page in range(0, with_heavy.light_pages, 7):
            heavy_page, light_page = with_heavy.links_of(site, page), without.links_of(site, page)
            own = [link for link in heavy_page if link[0] != HEAVY]
            # then the page has as many links as with the heavy site, none of them heavy
            assert len(light_page) == len(heavy_page) == 15
            assert all(target != HEAVY for target, _ in light_page)
            # and each light link keeps its place; each heavy one became one of those links
            for with_link, without_link in zip(heavy_page, light_page, strict=True):
                assert without_link == with_link if with_link[0] != HEAVY else without_link in own
            # so the light sites' link graph is the same: no page links anywhere new
            assert set(light_page) == set(own)


def test_the_redirected_links_are_the_same_in_any_process_and_spread_over_the_own_links() -> None:
    # given the web without its heavy site
    plan = BroadWeb(with_heavy=False)
    # then a page's links come from its seeds alone, not from a process's state (the bench
    # compares crawls of separate processes): the start page's are these
    assert plan.links_of(1, 0) == [
        (14, 33), (17, 135), (1, 1), (1, 1), (1, 1), (14, 33), (17, 135), (17, 135), (1, 1),
        (17, 135), (17, 135), (1, 1), (14, 33), (17, 135), (14, 33)]
    # and the 12 redirected links of a page do not all repeat one link: each of its 3 light
    # links is there 5 times on average, the most repeated one under 8 times on average
    pages = [(site, page) for site in plan.light for page in range(0, plan.light_pages, 5)]
    repeats = [max(Counter(plan.links_of(*page)).values()) for page in pages]
    assert statistics.mean(repeats) < 8


def test_a_page_without_the_heavy_site_serves_as_many_links_none_to_its_address() -> None:
    # given a small web with its heavy site and without it, not started (ports are 0)
    plan = BroadWeb(light_sites=3, light_pages=10)
    with_heavy, without = Web(plan), Web(replace(plan, with_heavy=False))
    # then each light page has the same number of links, and none to the heavy site's address
    for site in plan.light:
        for page in range(plan.light_pages):
            heavy_links = HREF_RE.findall(with_heavy.sites[site].page_body(page).decode())
            light_links = HREF_RE.findall(without.sites[site].page_body(page).decode())
            assert len(light_links) == len(heavy_links) == 15
            assert loopback_host(HEAVY) not in {host for host, _ in light_links}


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


def test_the_cpu_over_a_window_is_read_between_the_samples_around_its_ends() -> None:
    # given a counter sampled every second: 1 a second, then 3 a second from t=12
    samples = [(10.0, 0.0), (11.0, 1.0), (12.0, 2.0), (13.0, 5.0), (14.0, 8.0)]
    # then its growth over a window is read linearly between the samples around each end
    assert growth_between(samples, 10.5, 13.5) == pytest.approx(6.5 - 0.5)
    assert growth_between(samples, 10.0, 14.0) == 8.0
    # and a window the samples do not cover has no reading
    assert growth_between(samples, 9.0, 12.0) is None
    assert growth_between(samples, 12.0, 14.5) is None
    assert growth_between([], 1.0, 2.0) is None
