"""Adversarial review, store level: documented failure handling that does not hold."""

from __future__ import annotations

import contextlib

import pytest
from scrapy.settings import Settings
from test_store import joined, push_op
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import JobStore, StoreError, make_client
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

from support import wait_until


def test_a_batch_redis_refuses_for_a_foreign_key_of_the_wrong_type_changes_nothing(
    redis_server: RedisServer,
) -> None:
    """docs/guarantees.md: "a write Redis refuses for what it holds (a bug, a foreign key of
    the wrong type): every script validates every op before its first write, so a refused
    batch changes nothing". flush.lua validates op *shapes* only; a key of the wrong type
    fails mid-script (here the stats hash, written last), and Redis does not roll a script
    back: the pushes are applied, the call id is not recorded."""
    store, epoch = joined(redis_server)
    client = redis_server.client()
    client.set("clustersync:{job}:stats", "a foreign string")
    with contextlib.suppress(StoreError):
        store.flush(epoch, [push_op("http://a/1"), push_op("http://a/2")], new_call_id())
    # a refused batch changes nothing
    assert client.zcard("clustersync:{job}:queue") == 0


def test_a_node_whose_batch_redis_refuses_for_a_wrong_type_keeps_it_and_sends_it_once_mended(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The same, seen from the node. A key of the job that another program overwrote is not
    the batch's fault: the node says which key and what to do, keeps its writes (nothing is
    applied, nothing dead-lettered), and sends them once the key is mended."""
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000)[0]
    client = redis_server.client()
    client.set("clustersync:{job}:stats", "a foreign string")
    worker = NodeThread(store, config, epoch)
    worker.start()
    worker.submit(push_op("http://a/1"))
    worker.submit(push_op("http://a/2"))
    wait_until(lambda: "holds a string, not a hash" in caplog.text, 10, "the error")
    assert client.hlen("clustersync:{job}:entries") == 0
    assert "delete or rename that key" in caplog.text
    client.delete("clustersync:{job}:stats")
    wait_until(lambda: client.hlen("clustersync:{job}:entries") == 2, 10, "the writes")
    assert not worker.close(unacked=[])
