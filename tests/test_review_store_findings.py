"""Adversarial review, store level: documented failure handling that does not hold."""

from __future__ import annotations

import contextlib

from scrapy.settings import Settings
from test_store import joined, push_op

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import JobStore, StoreError, make_client
from scrapy_clustersync.store.job import new_call_id
from scrapy_clustersync.worker import SyncWorker

from conftest import RedisFactory


def test_a_batch_redis_refuses_for_a_foreign_key_of_the_wrong_type_changes_nothing(
    redis_server: RedisFactory,
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


def test_a_node_whose_batch_redis_refuses_for_a_wrong_type_dead_letters_it_and_goes_on(
    redis_server: RedisFactory,
) -> None:
    """The same, seen from the node: the worker only isolates ops on CLUSTERSYNC_BAD_OP
    (worker.py SyncWorker._flush catches BadBatch only); any other script error is retried
    as it is, for ever (SyncWorker._guard: "Redis refused a call ...; retrying"). The node
    never sends its later writes (acks included), so it never becomes idle and the job never
    finishes; at close the batch goes to the spool, where replay retries it the same way."""
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000)[0]
    redis_server.client().set("clustersync:{job}:stats", "a foreign string")
    worker = SyncWorker(store, config, epoch, node_info=dict, on_leased=lambda: None)
    worker.start()
    worker.add(push_op("http://a/1"))
    worker.add(push_op("http://a/2"))
    undelivered = worker.close(unacked=[])
    assert not undelivered
