"""`clustersync pause|resume|stop` for an ACL user without pub/sub permission (Redis 7's default
for a new user): the change is made, reported as made (exit 0), and every node follows it
within a second by reading the state, without the channel."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_job_control import JOB, SLOW, last_hit, paused_at, status

from testkit.redis_server import LOCALHOST, RedisServer

from conftest import SiteFactory
from support import (
    clustersync,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    wait_all,
    wait_until,
)


def user_without_channels(server: RedisServer) -> str:
    """The URL of a new ACL user that may run every command on every key but use no channel."""
    server.client().acl_setuser("crawler", enabled=True, passwords=["+crawlpw"],
                                keys=["*"], commands=["+@all"], reset_channels=True)
    return f"redis://crawler:crawlpw@{LOCALHOST}:{server.port}/0"


@pytest.mark.timing
def test_pause_resume_and_stop_by_a_user_without_pubsub_take_effect_and_report_success(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node crawling a slow site as an ACL user that may not PUBLISH nor SUBSCRIBE
    url = user_without_channels(redis_server)
    web = site(300, delay_s=0.1)
    node = start_node("node1", url, web.start_url, tmp_path, SLOW)
    wait_until(lambda: pages_fetched(web) > 20, 30, "the node to crawl")
    # when that user pauses the job
    paused = clustersync(url, "pause", JOB)
    # then the pause is reported done and the node stops fetching within a second
    assert paused.returncode == 0 and "paused job 'site'" in paused.stdout, paused.output
    assert status(url)["state"] == "paused"
    time.sleep(2.5)
    assert last_hit(web, ["node1"]) - paused_at(redis_server) < 1.0
    before = pages_fetched(web)
    # when it resumes the job
    resumed = clustersync(url, "resume", JOB)
    # then that is reported done too and the node crawls again
    assert resumed.returncode == 0 and "resumed job 'site'" in resumed.stdout, resumed.output
    wait_until(lambda: pages_fetched(web) > before + 10, 30, "the node to crawl again")
    # when it stops the job
    stopped = clustersync(url, "stop", JOB)
    # then the stop is reported done and the node closes for it, no page fetched twice
    assert stopped.returncode == 0 and "stopping job 'site'" in stopped.stdout, stopped.output
    wait_all([node], timeout_s=30)
    assert node.finish_reason() == "clustersync_stopped", node.log()[-3000:]
    assert not pages_fetched_twice(web)
    assert "may not subscribe to the control channel" in node.log()
