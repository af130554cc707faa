"""A node far from Redis (50 ms each way) that crawls without a pause follows `clustersync
pause` and `resume` as a near one does: it stops fetching within a second of the pause. Such a
node subscribes to the control channel only when it has the time (the subscription's
handshake would hold up its leases), and meanwhile re-reads the state in its round trips."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import ProxyFactory, SiteFactory
from support import (
    clustersync,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    wait_all,
    wait_until,
)

JOB = "site"
#: a crawl of several seconds at about 40 pages/s: the node's Redis thread always has writes due
SLOW = {"CONCURRENT_REQUESTS_PER_DOMAIN": "4", "CONCURRENT_REQUESTS": "4"}


@pytest.mark.timing
def test_a_node_far_from_redis_stops_fetching_within_a_second_of_a_pause_and_resumes(
    redis_server: RedisServer, proxy_factory: ProxyFactory, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node that reaches Redis at 50 ms each way, crawling a slow site
    web = site(200, delay_s=0.1)
    far_redis = proxy_factory(redis_server, delay_s=0.05)
    node = start_node("far", far_redis.url(), web.start_url, tmp_path, SLOW)
    wait_until(lambda: pages_fetched(web) > 60, 60, "the far node to crawl")
    # when the job is paused (by a CLI near Redis)
    paused = clustersync(redis_server.url, "pause", JOB)
    assert paused.returncode == 0, paused.stderr
    since_ms = int(redis_server.client().hget(f"clustersync:{{{JOB}}}:meta", "control_ms") or 0)
    pause_at = since_ms / 1000 - (time.time() - time.monotonic())  # on time.monotonic()'s clock
    time.sleep(3)
    # then it stopped fetching within 1 s of the moment Redis recorded the pause (the requests
    # under way finished), and fetched nothing after that while it stayed open
    last = web.agent_hits("far").last or 0.0
    print(f"\nfar node: last page fetched {last - pause_at:.3f}s after Redis recorded the pause; "
          f"{pages_fetched(web)} of {web.pages} pages fetched before it")
    assert last - pause_at < 1.0
    assert node.process.poll() is None
    # and once resumed, the crawl finishes with every page fetched exactly once
    resumed = clustersync(redis_server.url, "resume", JOB)
    assert resumed.returncode == 0, resumed.stderr
    wait_all([node], timeout_s=90)
    assert node.process.returncode == 0
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)
