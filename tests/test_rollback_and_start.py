"""The job's scripts against a real redis-server: Redis that came back older, start() claims,
idle time, and how a node reacts to them."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import CloseSpider
from scrapy.settings import Settings
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.plugin.node_lifecycle import NodeLifecycle
from scrapy_clustersync.store import Ack, JobStore, Push, PushFlags, StartDone, make_client
from scrapy_clustersync.store.errors import RolledBack
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

from conftest import RedisFactory, SiteFactory
from support import (
    joined,
    marks,
    missing_pages,
    node_env,
    push_op,
    start_done,
    start_node,
    wait_all,
    wait_until,
)


def beat(store: JobStore, epoch: str, idle: bool = False, **kw: Any) -> Any:
    options: dict[str, Any] = {"ttl_ms": 10_000, "lease_ms": 10_000, "info": {}, "idle": idle,
                               "idle_after_ms": 200, "lease_ids": []}
    return store.heartbeat(epoch, **(options | kw))


def test_a_node_notices_when_redis_comes_back_older_than_it_saw_it(
    redis_factory: RedisFactory,
) -> None:
    # given a node whose first writes are in a snapshot, and whose later writes are not
    redis = redis_factory()
    store, epoch = joined(redis)
    store.flush(epoch, [push_op("http://a/1")], new_call_id())
    redis.client().save()
    store.flush(epoch, [push_op("http://a/2")], new_call_id())
    # when Redis crashes and loads that snapshot
    redis.restart(crash=True)
    # then the node's next call of any kind says so, and changes nothing
    with pytest.raises(RolledBack):
        store.lease(epoch, 10, 10_000, new_call_id())
    assert redis.client().zcard("clustersync:{job}:queue") == 1
    # and once told, the node writes on from what Redis holds
    store.flush(epoch, [push_op("http://a/3")], new_call_id())


def test_entry_ids_are_never_reused_after_redis_came_back_older(
    redis_factory: RedisFactory,
) -> None:
    # given an entry pushed after a snapshot, and Redis restarted from that snapshot
    redis = redis_factory()
    store, epoch = joined(redis)
    redis.client().save()
    store.flush(epoch, [push_op("http://a/lost")], new_call_id())
    [(lost_id, _, _)] = store.lease(epoch, 1, 10_000, new_call_id())
    redis.restart(crash=True)
    other = JobStore(make_client(redis.url), "job", "n2")
    other.join(ttl_ms=10_000)
    # when another node pushes a new request (the entry sequence runs again)
    other.flush(epoch, [push_op("http://a/new")], new_call_id())
    [(new_id, _, _)] = other.lease(epoch, 1, 10_000, new_call_id())
    # then it has another id, so a late ack of the lost entry cannot delete it
    assert new_id != lost_id
    other.flush(epoch, [Ack(lost_id)], new_call_id())
    assert redis.client().hexists("clustersync:{job}:entries", new_id)


def make_worker(redis: Any, node: str = "n1", **settings: Any) -> tuple[NodeThread, JobStore, str]:
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis.url, **settings}), "job")
    store = JobStore(make_client(redis.url), "job", node)
    epoch, _ = store.join(ttl_ms=60_000)
    worker = NodeThread(store, config, epoch)
    return worker, store, epoch


def test_after_a_rollback_the_acks_of_requests_under_way_become_releases(
    redis_factory: RedisFactory,
) -> None:
    # given a node that crawls a leased request whose children went out after a snapshot
    redis = redis_factory()
    worker, store, epoch = make_worker(redis)
    store.flush(epoch, [push_op("http://a/parent")], new_call_id())
    redis.client().save()
    [(parent, _, _)] = store.lease(epoch, 1, 60_000, new_call_id())
    worker.worker._held.add(parent)
    store.flush(epoch, [push_op("http://a/child")], new_call_id())
    # when Redis comes back from the snapshot (the lease and the child are gone) ...
    redis.restart(crash=True)
    worker.start()
    # any write: it finds the rollback
    worker.submit(Push(b"x" * 20, 0, b"", flags=PushFlags.DONT_FILTER))
    time.sleep(1.0)
    # ... and the node acks the parent afterwards
    worker.submit(Ack(parent))
    assert not worker.close(unacked=[])
    # then the parent is queued again (to be crawled again, children and all), not deleted
    assert worker.link.rollbacks == 1
    assert redis.client().zscore("clustersync:{job}:queue", parent) is not None


def test_the_job_does_not_finish_while_start_is_claimed_and_not_exhausted(
    redis_server: RedisServer,
) -> None:
    # given a job whose start() is claimed by a live node and not done, every node idle
    runner, epoch = joined(redis_server, "runner")
    assert beat(runner, epoch, idle=True).start == "mine"
    time.sleep(0.3)
    # then it is not finished
    assert beat(runner, epoch, idle=True).finished is False
    # until start() is exhausted
    runner.flush(epoch, [StartDone()], new_call_id())
    time.sleep(0.3)
    assert beat(runner, epoch, idle=True).finished is True


def test_a_waiting_node_takes_start_over_from_a_node_that_is_gone(
    redis_server: RedisServer,
) -> None:
    # given a job whose start() claim belongs to a node whose liveness ran out
    runner = JobStore(make_client(redis_server.url), "job", "runner")
    epoch, claimed = runner.join(ttl_ms=200)
    waiter, _ = joined(redis_server, "waiter")
    assert claimed and beat(waiter, epoch).start == "other"
    time.sleep(0.3)
    # when another node beats (every node waits for start() to be done)
    answer = beat(waiter, epoch)
    # then it holds the claim
    assert answer.start == "mine"
    assert redis_server.client().hget("clustersync:{job}:meta", "start_claim") == b"waiter"


def test_a_node_busy_since_its_last_heartbeat_starts_its_idle_time_again(
    redis_server: RedisServer,
) -> None:
    # given a job with start() done and one node idle long enough to finish it ...
    node, epoch = joined(redis_server)
    node.flush(epoch, [StartDone()], new_call_id())
    beat(node, epoch, idle=True)
    time.sleep(0.3)
    # when its next heartbeat says it worked in between (but is idle again)
    # then its idle time starts again: the job is not finished yet
    assert beat(node, epoch, idle=True, busy_since_last=True).finished is False
    time.sleep(0.3)
    assert beat(node, epoch, idle=True).finished is True


class _GoneNode:
    """A node whose Redis thread found the job gone from Redis."""

    outcome = "clustersync_state_lost"
    io = None

    def engine_idle(self) -> None:
        pass


def test_a_node_whose_job_is_gone_closes_as_such_even_when_idle_first() -> None:
    # given a node whose Redis thread found the job gone
    lifecycle = NodeLifecycle(crawler=None)  # type: ignore[arg-type]
    lifecycle.node_opened(_GoneNode())  # type: ignore[arg-type]
    # when the engine goes idle before the extension's loop closes it
    # then it closes with the reason that says so, never "finished"
    with pytest.raises(CloseSpider) as closing:
        lifecycle.spider_idle()
    assert closing.value.reason == "clustersync_state_lost"


# ---- real nodes: start() lost by a rollback or a kill -------------------------------------------

def test_start_lost_by_a_rollback_is_run_again_when_the_node_that_ran_it_has_left(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """Node "runner" runs start() (20 pages, slowly); node "other" waits for it. Redis is saved
    while start() is under way. start() ends, "runner" leaves (SIGTERM: scale-down, deploy),
    then Redis crashes and comes back from the snapshot: start_done is gone and start_claim
    names "runner". Only the node that exhausted start() itself reruns it
    (ClusterScheduler.start_lost); "other" gets start == "other" from every heartbeat
    (heartbeat.lua takes a dead node's claim over only for a node in wait_for_start, whose
    wait ended long ago), so the job never finishes, and start()'s pages yielded after the
    snapshot (and not crawled before the crash) are never crawled."""
    web = site(20, delay_s=0.3)
    settings = {"PAGES": "20", "CONCURRENT_REQUESTS": "1"}
    runner = start_node("runner", redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=fault_project, spider="slowstart", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "started")) >= 2, 60, "start() to be under way")
    other = start_node("other", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=fault_project, spider="slowstart", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) == 20, 60, "start() to be exhausted")
    wait_until(lambda: start_done(redis_server, "slowstart"), 30, "Redis to hold start() done")
    runner.process.send_signal(signal.SIGTERM)
    assert runner.wait(60) == 0
    redis_server.restart(crash=True)
    wait_all([other], timeout_s=90)
    assert other.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_start_run_again_after_a_rollback_includes_what_spider_middlewares_add(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """As test_guarantees::test_start_runs_again_when_redis_comes_back_older_than_its_end, but
    the start requests come from a spider middleware's process_start (as plugins that read
    URLs from a file, a sitemap or a queue do). ClusterScheduler.rerun_start iterates
    ``spider.start()`` directly, not the middleware chain, so after the rollback only page 0
    is yielded again; the pages the middleware yielded after the snapshot are lost, and the
    job ends "finished" without them."""
    web = site(20, delay_s=0.3)
    settings = {"PAGES": "20", "CONCURRENT_REQUESTS": "1",
                "SPIDER_MIDDLEWARES": '{"example.spiders.faults.ExtraStartUrls": 600}'}
    env = node_env(tmp_path, SITE_BASE=web.url + "/page", PAGES="20")
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, settings,
                      project_dir=fault_project, spider="mwstart", env=env)
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) == 19, 60, "start() to be exhausted")
    wait_until(lambda: start_done(redis_server, "mwstart"), 30, "Redis to hold start() done")
    redis_server.restart(crash=True)
    wait_all([node], timeout_s=120)
    assert "runs start() again" in node.log()
    assert node.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_start_requests_lost_by_a_rollback_while_start_runs_are_yielded_again(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """As test_guarantees::test_start_runs_again_when_redis_comes_back_older_than_its_end,
    but Redis crashes back to the snapshot while start() is still running (the default Redis
    setup, RDB snapshots, does this). The node notices the rollback, start() goes on and ends,
    and ClusterScheduler.start_exhausted records ``_start_done_at = worker.rollbacks``, a count
    that already includes this rollback: start_lost() never becomes true, start() is not run
    again, and the requests start() yielded between the snapshot and the crash (queued, not
    crawled yet) are gone. The job ends "finished" without those pages."""
    web = site(24, delay_s=0.3)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      {"PAGES": "24", "CONCURRENT_REQUESTS": "1"}, project_dir=fault_project,
                      spider="slowstart", env=node_env(tmp_path))
    wait_until(lambda: len(marks(tmp_path, "started")) >= 8, 60, "start() to be under way")
    redis_server.client().save()
    wait_until(lambda: len(marks(tmp_path, "started")) >= 16, 60, "start() to go on")
    redis_server.restart(crash=True)
    wait_all([node], timeout_s=120)
    assert "came back older" in node.log()
    assert node.finish_reason() == "finished"
    assert missing_pages(web) == []


def test_start_is_not_done_before_a_spider_middleware_closer_to_the_engine_is_done_with_it(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path, tmp_path: Path
) -> None:
    """ClusterSpiderMiddleware sat at order 0 and sent "S" (start() exhausted) when *its*
    iteration ended. A spider middleware at a negative order (closer to the engine) may hold
    start()'s output for a while (here: it reads it all, then feeds it at a pace). start_done
    is then in Redis before the requests reach the scheduler; a kill -9 there loses them: no
    node runs start() again, and the job ends "finished" without them."""
    web = site(10)
    settings = {"PAGES": "10",
                "SPIDER_MIDDLEWARES": '{"example.spiders.faults.PacedStart": -10}'}
    first = start_node("first", redis_server.url, web.start_url, tmp_path, settings,
                       project_dir=fault_project, spider="quickstart", env=node_env(tmp_path))
    client = redis_server.client()
    wait_until(lambda: client.hexists("clustersync:{quickstart}:meta", "start_done"), 60,
               "start() to be marked exhausted in Redis")
    # start() is done only once the middleware nearest the engine has handed all of it over
    assert len(marks(tmp_path, "fed")) == 10
    first.kill()
    second = start_node("second", redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=fault_project, spider="quickstart", env=node_env(tmp_path))
    wait_all([second], timeout_s=60)
    assert second.finish_reason() == "finished"
    assert missing_pages(web) == []
