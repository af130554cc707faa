"""Job control on an in-memory Redis: control.lua's transitions, the message it publishes, a
node that follows the state (also when it missed the message), and the state status shows."""

from __future__ import annotations

import time
from pathlib import Path

import fakeredis
import pytest
from scrapy.settings import Settings

from scrapy_clustersync.cli.status_view import state_of, status_dict
from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.control_follower import ControlFollower
from scrapy_clustersync.plugin.job_control import JobControl
from scrapy_clustersync.plugin.stop_reasons import is_failure
from scrapy_clustersync.store import JobStore, Push
from scrapy_clustersync.store.job_store import new_call_id

from .node_fakes import fake_engine, make_scheduler
from .test_scheduler import lease_to
from .thread_harness import NodeThread


@pytest.fixture
def store() -> JobStore:
    job = JobStore(fakeredis.FakeRedis(), "shop", node_id="cli", writes_seen=None)
    job.ensure_job()
    return job


def wait_for(condition: object, timeout_s: float) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout_s``."""
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.01)
    return time.monotonic() - started


def test_pause_resume_and_stop_move_the_job_through_its_states(store: JobStore) -> None:
    # given a running job with no live node
    # when it is paused, paused again, resumed and stopped
    paused = store.set_control("pause")
    again = store.set_control("pause")
    resumed = store.set_control("resume")
    stopped = store.set_control("stop")
    # then each step says what it did; a stop with no node to wait for is complete at once
    assert (paused.verdict, paused.before, paused.after) == ("changed", "running", "paused")
    assert (again.verdict, again.after) == ("same", "paused")
    assert (resumed.verdict, resumed.after) == ("changed", "running")
    assert (stopped.verdict, stopped.after) == ("changed", "stopped")
    assert store.control_state().state == "stopped" and store.control_state().since_ms > 0
    # and a stopped job cannot be paused, only resumed
    assert store.set_control("pause").verdict == "stopping"
    assert store.set_control("resume").after == "running"


def test_a_stop_waits_for_live_nodes_and_is_settled_when_the_last_one_left(
    store: JobStore
) -> None:
    # given a job with a live node
    store.client.zadd(store.keys.nodes, {"node1": 2**52})
    # when it is stopped, then it is stopping while the node lives
    assert store.set_control("stop").after == "stopping"
    assert store.set_control("settle").after == "stopping"
    # when the node left, then settling completes the stop
    store.client.zrem(store.keys.nodes, "node1")
    assert store.set_control("settle").after == "stopped"


def test_a_finished_job_cannot_be_paused_or_stopped(store: JobStore) -> None:
    # given a job its nodes recorded as finished
    store.client.hset(store.keys.meta, "finished_ms", 1)
    # when it is paused or stopped, then nothing changes
    assert store.set_control("pause").verdict == "finished"
    assert store.set_control("stop").verdict == "finished"
    assert store.control_state().state == "running"


def test_a_finished_job_seeded_again_can_be_paused(store: JobStore) -> None:
    # given a finished job with a URL queued since (the next node crawls it)
    store.client.hset(store.keys.meta, "finished_ms", 1)
    store.client.zadd(store.keys.queue, {"entry": 0})
    # when it is paused, then it is
    assert store.set_control("pause").after == "paused"


def test_a_change_is_published_on_the_jobs_channel(store: JobStore) -> None:
    # given a subscriber of the job's control channel
    subscription = store.control.subscribe()
    # when the job is paused, then the subscriber hears the new state
    store.set_control("pause")
    heard = [subscription.wait(0.1) for _ in range(5)]
    subscription.close()
    assert "paused" in heard


def follow_until(follower: ControlFollower, state: str, timeout_s: float) -> float:
    """Seconds until ``follower``, called as often as the Redis thread calls it, knew
    ``state``; fails after ``timeout_s``."""
    def knows() -> bool:
        follower.follow(time.monotonic())
        return follower.state == state

    return wait_for(knows, timeout_s)


def test_a_node_applies_a_published_change_at_once(store: JobStore) -> None:
    # given a node that re-reads the state only every 5 s
    follower = ControlFollower(store.control, "shop", reread_s=5)
    follow_until(follower, "running", 1)  # subscribed and read once
    # when the job is paused, then the node follows within a second (the message)
    store.set_control("pause")
    took = follow_until(follower, "paused", 2)
    follower.close()
    assert took < 1 and not follower.allows_downloads


def test_a_node_that_missed_the_message_converges_by_reading_again(store: JobStore) -> None:
    # given a node following the job
    follower = ControlFollower(store.control, "shop", reread_s=0.2)
    follow_until(follower, "running", 1)
    # when the state changes without a message (the node missed it)
    store.client.hset(store.keys.meta, mapping={"control": "paused", "control_ms": 1})
    # then the node follows within its re-read interval
    took = follow_until(follower, "paused", 2)
    follower.close()
    assert took < 1


def test_status_shows_the_control_state_and_a_stop_nobody_holds_up_as_stopped(
    store: JobStore
) -> None:
    # given a paused job, then a job stopping with no live node (its nodes were killed)
    store.set_control("pause")
    assert state_of(store.status()) == "paused"
    store.client.hset(store.keys.meta, "control", "stopping")
    # then status shows it stopped
    report = store.status()
    assert state_of(report) == "stopped" and status_dict(report)["control"] == "stopped"


def test_a_paused_node_hands_out_nothing_until_resumed(tmp_path: Path) -> None:
    # given a node with a leased request, following its job
    scheduler, thread = make_scheduler(tmp_path)
    ext = JobControl(scheduler.crawler)
    ext.node_opened(scheduler)
    lease_to(scheduler, thread, "http://a/1", "e1")
    # when its Redis thread hands over that the job is paused
    thread.control = "paused"
    thread.changed()
    # then the engine gets nothing, the request is kept
    assert scheduler.next_request() is None
    assert len(scheduler) == 1 and ext.applied == "paused"
    # when it is resumed, then the engine is woken and the request is handed out
    woken = fake_engine(scheduler).woken
    thread.control = "running"
    thread.changed()
    request = scheduler.next_request()
    assert request is not None and request.url == "http://a/1"
    assert fake_engine(scheduler).woken > woken


def test_the_redis_thread_of_a_paused_job_leases_nothing_until_resumed(store: JobStore) -> None:
    # given a paused job with one request queued, and a node of it
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0"}), "shop")
    node_store = JobStore(store.client, "shop", config.node_id)
    epoch, _ = node_store.join(ttl_ms=60_000, claim=False)
    node_store.flush(epoch, [Push(b"\x01" * 20, 0, b"request")], new_call_id())
    store.set_control("pause")
    node = NodeThread(node_store, config, epoch)
    # when its Redis thread runs a while
    node.start()
    node.wait_for(lambda link: link.control == "paused", 2)
    time.sleep(0.3)
    node.pump()
    # then it leased nothing; once the job is resumed it leases the request
    assert node.link.waiting == 0
    store.set_control("resume")
    node.wait_for(lambda link: link.waiting == 1, 3)
    entry = node.take()
    assert node.close(unacked=[entry[0]] if entry else []) is not None


def test_a_stopped_job_closes_the_node_with_clustersync_stopped(tmp_path: Path) -> None:
    # given a node following its job, with its spider open
    scheduler, thread = make_scheduler(tmp_path)
    ext = JobControl(scheduler.crawler)
    ext.node_opened(scheduler)
    fake_engine(scheduler).spider = scheduler.crawler.spider
    # when its Redis thread hands over that the job is stopping
    thread.control = "stopping"
    thread.changed()
    # then the engine closes the spider with clustersync_stopped, a failure reason
    assert fake_engine(scheduler).closed_with == "clustersync_stopped"
    assert is_failure("clustersync_stopped")
