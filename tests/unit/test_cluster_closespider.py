"""The cluster CloseSpider extension's settings: what the add-on switches on and off, how
limits are read and checked, and how a live change applies."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.extensions.closespider import CloseSpider
from scrapy.settings import Settings
from scrapy.utils.conf import build_component_list

from scrapy_clustersync.plugin.addon import REFUSED_SCHEDULER_PATH, Addon
from scrapy_clustersync.plugin.cluster_closespider import ClusterCloseSpider, limits_from
from scrapy_clustersync.store.closespider_script import CloseLimits, SpiderCounts

REDIS_URL = "redis://127.0.0.1:1/0"  # never contacted


def extensions_after_addon(**project: object) -> tuple[Settings, list[Any]]:
    settings = Settings({"CLUSTERSYNC_REDIS_URL": REDIS_URL, **project})
    Addon().update_settings(settings)
    return settings, build_component_list(settings.getwithbase("EXTENSIONS"))


def test_in_cluster_mode_scrapys_closespider_is_replaced_by_the_clusters() -> None:
    _, extensions = extensions_after_addon()
    assert ClusterCloseSpider in extensions
    assert CloseSpider not in extensions
    assert "scrapy.extensions.closespider.CloseSpider" not in extensions


def test_in_node_mode_scrapys_closespider_counts_each_process() -> None:
    _, extensions = extensions_after_addon(CLUSTERSYNC_POLITENESS="node")
    assert ClusterCloseSpider not in extensions
    assert CloseSpider in extensions or "scrapy.extensions.closespider.CloseSpider" in extensions


def test_a_limit_that_is_not_a_number_stops_the_node_naming_it() -> None:
    with pytest.raises(ValueError, match="CLOSESPIDER_PAGECOUNT = 'fifty' is not accepted"):
        limits_from(Settings({"CLOSESPIDER_PAGECOUNT": "fifty"}))
    settings, _ = extensions_after_addon(CLOSESPIDER_TIMEOUT="-3")
    assert settings["SCHEDULER"] == REFUSED_SCHEDULER_PATH


def test_limits_come_from_the_settings_with_zero_for_off() -> None:
    limits = limits_from(Settings({"CLOSESPIDER_PAGECOUNT": "50", "CLOSESPIDER_TIMEOUT": "2.5"}))
    assert limits == CloseLimits(pagecount=50, timeout_s=2.5)
    assert limits.any and limits.timed and not CloseLimits().any


def test_a_live_change_sets_the_keys_it_names_and_an_unset_key_turns_its_limit_off() -> None:
    # Given limits of 50 pages and 10 items
    ext = ClusterCloseSpider(crawler=None, limits=CloseLimits(pagecount=50, itemcount=10))  # type: ignore[arg-type]
    # When a settings version changes the page limit and unsets the item limit
    ext.settings_changed(changed={"CLOSESPIDER_PAGECOUNT": 80, "CLOSESPIDER_ITEMCOUNT": None,
                                  "DOWNLOAD_DELAY": 1.0}, version=3)
    # Then the new limits apply; a bad value later keeps them
    assert ext.limits == CloseLimits(pagecount=80)
    ext.settings_changed(changed={"CLOSESPIDER_PAGECOUNT": "many"}, version=4)
    assert ext.limits == CloseLimits(pagecount=80)


class FakeNodeIO:
    """What the extension reads of the node's Redis thread: the job's totals it last heard."""

    def __init__(self) -> None:
        self.closespider_totals = (0, 0, 0)
        self.tickets = 0
        self.sent: list[Any] = []

    def counted(self, message: Any, wake: bool = False) -> None:
        self.sent.append(message)


def test_a_page_limit_set_live_counts_the_pages_redis_counts_so_the_node_still_crawls() -> None:
    # given a node crawling with no CLOSESPIDER_* limit on, which got 60 responses (not counted
    # for the job: Redis has none of them)
    ext = ClusterCloseSpider(crawler=None, limits=CloseLimits())  # type: ignore[arg-type]
    node = type("Node", (), {"io": FakeNodeIO()})()
    ext.node_opened(node)
    for _ in range(60):
        ext.response_received()
    # when CLOSESPIDER_PAGECOUNT = 50 is set live (the job's total on Redis: 0)
    ext.settings_changed(changed={"CLOSESPIDER_PAGECOUNT": 50}, version=2)
    # then its scheduler still hands out requests: the job stops once Redis counted 50 pages,
    # which it never would if this node took nothing more
    assert node.pages_used_up() is False


def test_an_own_count_at_the_limit_holds_the_node_only_until_redis_could_have_heard_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # given a node that counted 5 pages against CLOSESPIDER_PAGECOUNT = 5, while the job's
    # total it hears stays at 2 (Redis came back from an older snapshot)
    from scrapy_clustersync.plugin import cluster_closespider
    clock = [100.0]
    monkeypatch.setattr(cluster_closespider, "monotonic", lambda: clock[0])
    ext = ClusterCloseSpider(crawler=None, limits=CloseLimits(pagecount=5))  # type: ignore[arg-type]
    node = type("Node", (), {"io": FakeNodeIO()})()
    ext.node_opened(node)
    for _ in range(5):
        ext.response_received()
    ext._pending = SpiderCounts()  # sent to Redis
    node.io.closespider_totals = (2, 0, 0)
    # then its scheduler hands out nothing at first, as Scrapy's engine would
    assert node.pages_used_up() is True
    # and once Redis had the time to hear it, the total Redis holds decides: the node crawls on
    clock[0] += cluster_closespider.OWN_COUNT_GRACE_S + 0.1
    assert node.pages_used_up() is False
    # and when the job's total reaches the limit, it stops handing out again
    node.io.closespider_totals = (5, 0, 0)
    assert node.pages_used_up() is True
