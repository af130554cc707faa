"""A node far from Redis (0.2 s each way) that joins and claims start() is not declared dead
during its start-up, before its first heartbeat could come: start() runs once, on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

from conftest import ProxyFactory, SiteFactory
from support import start_node, wait_all, wait_until

JOB = "site"
META = f"clustersync:{{{JOB}}}:meta"
#: the threshold and heartbeat of the case: a far node makes about ten round trips between its
#: join and its first heartbeat, 4 s at 0.2 s each way, longer than the threshold
LIVENESS = {"CLUSTERSYNC_NODE_DEAD_AFTER": "1.5", "CLUSTERSYNC_HEARTBEAT_INTERVAL": "0.5",
            "CLUSTERSYNC_LEASE_TIMEOUT": "10",
            # a crawl of several seconds, so that the far node, slow to lease, gets its share
            "CONCURRENT_REQUESTS": "2"}


@pytest.mark.timing
def test_a_node_far_from_redis_is_not_declared_dead_before_its_first_heartbeat_and_start_runs_once(
    redis_server: RedisServer, proxy_factory: ProxyFactory, site: SiteFactory, tmp_path: Path
) -> None:
    # given a local node beating every 0.5 s in a job whose start() claim a placeholder holds
    # (so that the far node is the one to claim it, as the first node of a job does)
    web = site(80, delay_s=0.1)
    client = redis_server.client()
    placeholder = JobStore(make_client(redis_server.url), JOB, "placeholder")
    placeholder.join_node(ttl_ms=600_000)
    local = start_node("local", redis_server.url, web.start_url, tmp_path, LIVENESS)
    wait_until(lambda: client.hexists(f"clustersync:{{{JOB}}}:node_info", _node_of(client)),
               60, "the local node's first heartbeat")
    # when a node reaching Redis at 0.2 s each way starts, and the claim is free when it joins
    far_redis = proxy_factory(redis_server, delay_s=0.2)
    far = start_node("far", far_redis.url(), web.start_url, tmp_path,
                     {**LIVENESS, "LOG_LEVEL": "DEBUG"})
    wait_until(lambda: far_redis.connections_accepted > 0, 60, "the far node to connect")
    client.hdel(META, "start_claim")
    wait_until(lambda: client.hget(META, "start_claim") is not None, 30, "a start() claim")
    client.zrem(f"clustersync:{{{JOB}}}:nodes", "placeholder")
    wait_all([local, far], timeout_s=120)
    # then the far node claimed start(), was never declared dead, and start() ran once: the
    # start page was fetched once, and the far node fetched pages too
    far_log, local_log = far.log(), local.log()
    start_runs = (far_log + local_log).count("clustersync: start() of job 'site' is exhausted")
    print(f"\nfar node at 0.2 s each way: declared dead "
          f"{(far_log + local_log).count('sent no heartbeat for')} times; start() ran "
          f"{start_runs} times; start page fetched {web.hits().get(web.page_path(0), 0)} times; "
          f"far node fetched {sum(web.agent_hits('far').hits.values())} of {web.pages} pages")
    assert "declared dead" not in far_log + local_log, (far_log[-3000:], local_log[-3000:])
    assert client.hlen(f"clustersync:{{{JOB}}}:dead_nodes") == 0
    assert start_runs == 1 and "runs it now" not in local_log, local_log[-3000:]
    assert web.hits().get(web.page_path(0)) == 1, web.hits_by_agent()
    assert sum(web.agent_hits("far").hits.values()) > 0, far_log[-3000:]
    assert all(web.hits().get(path) == 1 for path in web.page_paths()), web.hits()
    assert (far.process.returncode, local.process.returncode) == (0, 0)


def _node_of(client: object) -> str:
    """The id of the one node other than the placeholder that joined (the local one)."""
    ids = [n.decode() for n in client.zrange(f"clustersync:{{{JOB}}}:nodes", 0, -1)]  # type: ignore[attr-defined]
    others = [n for n in ids if n != "placeholder"]
    return others[0] if others else "-"
