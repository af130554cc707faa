"""The one wait of the reactor on Redis (``await_lease``) never stalls a node whose Redis is away.

``next_request()`` blocks the reactor in ``SyncWorker.await_lease`` (``DEQUEUE_WAIT_S`` = 1 s at
most) when the node has nothing prefetched, pushes in transit and nothing downloading: it is let
go as soon as Redis is found away, and after one wait that came back empty it does not wait
again until a lease has come back.
"""

from __future__ import annotations

import time

import pytest
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.redis_thread import SyncWorker
from scrapy_clustersync.store import JobStore, Push, make_client
from testkit.proxy import TcpProxy
from testkit.redis_server import RedisServer

from conftest import ProxyFactory

#: both tests measure how long the reactor is held (seconds): never beside another such test
pytestmark = pytest.mark.timing


def _node_through(proxy: TcpProxy, **settings: str) -> SyncWorker:
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": proxy.url(), **settings}), "job")
    store = JobStore(make_client(proxy.url(), socket_timeout_s=config.socket_timeout_s),
                     "job", config.node_id)
    epoch = store.join(ttl_ms=60_000, claim=False)[0]
    return SyncWorker(store, config, epoch, node_info=dict, on_leased=lambda: None)


def _blocked_s(worker: SyncWorker, fingerprint: int) -> float:
    """What one next_request() of a starving node costs the reactor: a push, then the wait."""
    worker.submit(Push(bytes([fingerprint]) * 20, 0, b"child"))
    began = time.monotonic()
    worker.await_lease(1.0)
    return time.monotonic() - began


def test_a_reactor_waiting_for_a_lease_is_let_go_as_soon_as_redis_is_found_away(
    redis_server: RedisServer, proxy_factory: ProxyFactory,
) -> None:
    # given a starving node whose Redis connections are refused from now on
    proxy = proxy_factory(redis_server)
    worker = _node_through(proxy, CLUSTERSYNC_HEARTBEAT_INTERVAL="20",
                           CLUSTERSYNC_LEASE_TIMEOUT="60")
    worker.start()
    time.sleep(0.3)
    proxy.cut()
    # when its engine asks for work (a new child request is on its way to Redis)
    blocked_s = _blocked_s(worker, 1)
    away = worker._away_since is not None
    worker.close(unacked=[])
    # then the thread finds Redis away within milliseconds, and the reactor is let go then,
    # not after the full DEQUEUE_WAIT_S
    assert away
    assert blocked_s < 0.5, f"the reactor was blocked {blocked_s:.2f}s"


def test_a_redis_that_stops_answering_does_not_block_the_reactor_a_second_per_child_request(
    redis_server: RedisServer, proxy_factory: ProxyFactory,
) -> None:
    # given a starving node whose Redis stops answering (packets dropped: a partition),
    # with the default socket timeout (10 s) before the node calls it an outage
    proxy = proxy_factory(redis_server)
    worker = _node_through(proxy, CLUSTERSYNC_HEARTBEAT_INTERVAL="20",
                           CLUSTERSYNC_LEASE_TIMEOUT="60")
    worker.start()
    time.sleep(0.3)
    proxy.cut(blackhole=True)
    # when a callback yields five children, the engine asking for work after each
    blocked_s = sum(_blocked_s(worker, i) for i in range(1, 6))
    proxy.restore()
    worker.close(unacked=[])
    # then the reactor (callbacks, pipelines, the whole crawl) is held once, not for their sum
    assert blocked_s < 2.0, f"the reactor was blocked {blocked_s:.2f}s for 5 children"

