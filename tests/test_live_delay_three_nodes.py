"""The whole cluster's politeness changes while it crawls: `clustersync config set JOB
DOWNLOAD_DELAY 0.25` brings three nodes together to at most 4 requests a second to the site
within 2 s, and `config unset` gives them their full speed back within 2 s (real `scrapy
crawl` nodes, the real CLI, a real redis-server; rates read from the site's own access times)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import SiteFactory
from support import clustersync, start_nodes, wait_all, wait_until

JOB = "site"
NODES = ["node1", "node2", "node3"]
#: the window the rates are counted over, after the 2 s a change has to take effect
WINDOW_S = 3.0
SETTLE_S = 2.0


def hits(web: TestSite) -> list[float]:
    return sorted(t for name in NODES for t in web.agent_hits(name).times)


def rate_in(web: TestSite, start: float, end: float) -> float:
    return sum(1 for t in hits(web) if start <= t < end) / (end - start)


@pytest.mark.timing
def test_config_set_download_delay_slows_three_nodes_together_and_unset_restores_speed(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given three nodes crawling a big local site at full speed (no delay set anywhere)
    web = site(3000, delay_s=0.01)
    nodes = start_nodes(3, redis_server.url, web.start_url, tmp_path,
                        # one turn exactly every 0.25 s (Scrapy's 0.5-1.5 x jitter would make
                        # the count in a 3 s window vary around 12 both ways)
                        {"CLUSTERSYNC_PREFETCH": "4", "RANDOMIZE_DOWNLOAD_DELAY": "False"})
    wait_until(lambda: all(len(web.agent_hits(n).times) >= 20 for n in NODES), 60,
               "all three nodes to crawl")
    fast_start = time.monotonic()
    time.sleep(WINDOW_S)
    full_speed = rate_in(web, fast_start, time.monotonic())
    assert full_speed > 20, f"the cluster crawled only {full_speed:.1f} pages/s at full speed"

    # when the delay is set for the job while it crawls
    changed = clustersync(redis_server.url, "config", "set", JOB, "DOWNLOAD_DELAY", "0.25")
    assert changed.returncode == 0, changed.stderr
    set_at = time.monotonic()
    time.sleep(SETTLE_S + WINDOW_S)
    # then within 2 s the whole cluster sends at most 4 requests a second (one turn per 0.25 s,
    # plus one turn of edge in the window)
    slow = rate_in(web, set_at + SETTLE_S, set_at + SETTLE_S + WINDOW_S)
    assert slow <= 4 + 1 / WINDOW_S, f"{slow:.2f} requests/s after DOWNLOAD_DELAY 0.25"
    assert slow >= 2, f"the cluster nearly stopped: {slow:.2f} requests/s"

    # when the delay is unset
    restored = clustersync(redis_server.url, "config", "unset", JOB, "DOWNLOAD_DELAY")
    assert restored.returncode == 0, restored.stderr
    unset_at = time.monotonic()
    time.sleep(SETTLE_S + WINDOW_S)
    fast_again = rate_in(web, unset_at + SETTLE_S, unset_at + SETTLE_S + WINDOW_S)
    print(f"\nfull speed {full_speed:.1f}/s, with DOWNLOAD_DELAY 0.25 {slow:.2f}/s, "
          f"after unset {fast_again:.1f}/s")
    # then full speed is back within 2 s
    assert fast_again >= 0.5 * full_speed, (
        f"{fast_again:.1f} pages/s after unset, {full_speed:.1f} before the delay")

    stopped = clustersync(redis_server.url, "stop", JOB)
    assert stopped.returncode == 0, stopped.stderr
    wait_all(nodes, 60)
