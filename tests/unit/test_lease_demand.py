"""DownloaderDemand: what a node's downloader holds and can take, read from Scrapy's own slots,
as the lease is sized from it (the paced sites' need)."""

from __future__ import annotations

from time import monotonic
from types import SimpleNamespace

from scrapy.core.downloader import Slot
from scrapy.settings import Settings

from scrapy_clustersync.plugin.lease_demand import DownloaderDemand, paced_need


def slot(delay: float, last_used_s_ago: float) -> Slot:
    each = Slot(concurrency=1, delay=delay, jitter=0)
    each.lastseen = monotonic() - last_used_s_ago
    return each


def demand_of(slots: dict[str, Slot]) -> DownloaderDemand:
    downloader = SimpleNamespace(slots=slots, total_concurrency=100, active=set())
    engine = SimpleNamespace(downloader=downloader)
    return DownloaderDemand(lambda: engine, lambda: 0, Settings({"DOWNLOAD_DELAY": 0.1}))


def test_a_paced_site_in_use_keeps_one_and_a_half_seconds_of_its_turns_ready() -> None:
    # given a downloader with one site at 0.1 s used a second ago
    measured = demand_of({"a.com": slot(0.1, 1.0)})()
    # then the lease is sized for 1 + 15 requests of it, plus one site not seen yet
    assert paced_need(0.1) == 16
    assert measured.capacity == 16 + 1


def test_a_paced_site_done_with_sizes_the_lease_no_more() -> None:
    # given forty sites Scrapy still keeps slots for, last used a minute ago, and one in use
    slots = {f"idle{i}.com": slot(1.0, 60.0) for i in range(40)}
    slots["busy.com"] = slot(1.0, 0.5)
    # then only the busy one counts (with the site not seen yet)
    assert demand_of(slots)().capacity == paced_need(1.0) + 1
