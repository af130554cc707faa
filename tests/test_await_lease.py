"""A node starving for its own new requests never waits on Redis: it asks and is woken.

``next_request()`` of a node with nothing prefetched, pushes in transit and nothing downloading
asks the Redis thread for a lease after those pushes (``want_lease``) and returns None at once;
the lease that comes back wakes the engine. A Redis that is away, or stops answering, costs the
reactor nothing, and the node gets its requests once Redis is back.
"""

from __future__ import annotations

import time

import pytest
from scrapy.settings import Settings
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import JobStore, Push, make_client
from testkit.proxy import TcpProxy
from testkit.redis_server import RedisServer

from conftest import ProxyFactory

#: both tests measure how long the reactor is held (seconds): never beside another such test
pytestmark = pytest.mark.timing

def _node_through(proxy: TcpProxy, woken: list[float], **settings: str) -> NodeThread:
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": proxy.url(), **settings}), "job")
    store = JobStore(make_client(proxy.url(), socket_timeout_s=config.socket_timeout_s),
                     "job", config.node_id)
    epoch = store.join(ttl_ms=60_000, claim=False)[0]
    return NodeThread(store, config, epoch, on_leased=lambda: woken.append(time.monotonic()))


def _asking_s(node: NodeThread, fingerprint: int) -> float:
    """What one next_request() of a starving node costs the reactor: a push, then the ask."""
    began = time.monotonic()
    node.link.submit(Push(bytes([fingerprint]) * 20, 0, b"child"))
    node.link.want_lease()
    node.pump()
    return time.monotonic() - began


def test_a_node_starving_while_redis_is_away_gets_its_request_once_redis_is_back(
    redis_server: RedisServer, proxy_factory: ProxyFactory,
) -> None:
    # given a starving node whose Redis connections are refused from now on
    proxy = proxy_factory(redis_server)
    woken: list[float] = []
    node = _node_through(proxy, woken, CLUSTERSYNC_HEARTBEAT_INTERVAL="20",
                         CLUSTERSYNC_LEASE_TIMEOUT="60")
    node.start()
    time.sleep(0.3)
    proxy.cut()
    # when its engine asks for work (a new child request is on its way to Redis)
    asked_s = _asking_s(node, 1)
    node.wait_for(lambda _: node.worker._away_since is not None, 5)
    # then the reactor was not held, and once Redis is back the request comes back leased
    # and the engine is woken for it
    proxy.restore()
    node.wait_for(lambda link: link.waiting == 1, 15)
    entry = node.take()
    node.close(unacked=[entry[0]] if entry else [])
    assert asked_s < 0.05, f"the reactor was held {asked_s:.3f}s"
    assert entry is not None and entry[1] == b"child" and woken


def test_a_redis_that_stops_answering_does_not_hold_the_reactor_for_child_requests(
    redis_server: RedisServer, proxy_factory: ProxyFactory,
) -> None:
    # given a starving node whose Redis stops answering (packets dropped: a partition),
    # with the default socket timeout (10 s) before the node calls it an outage
    proxy = proxy_factory(redis_server)
    woken: list[float] = []
    node = _node_through(proxy, woken, CLUSTERSYNC_HEARTBEAT_INTERVAL="20",
                         CLUSTERSYNC_LEASE_TIMEOUT="60")
    node.start()
    time.sleep(0.3)
    proxy.cut(blackhole=True)
    # when a callback yields five children, the engine asking for work after each
    asked_s = sum(_asking_s(node, i) for i in range(1, 6))
    proxy.restore()
    node.wait_for(lambda link: link.waiting == 5, 30)
    taken = [node.take() for _ in range(5)]
    node.close(unacked=[entry[0] for entry in taken if entry])
    # then the reactor (callbacks, pipelines, the whole crawl) was never held, and every
    # child came back to the node once Redis answered again
    assert asked_s < 0.1, f"the reactor was held {asked_s:.3f}s for 5 children"
    assert all(entry is not None for entry in taken)
