"""Job control for the whole cluster: `clustersync pause`, `resume` and `stop`, applied by every
node within a second, measured from the test site's own access log (real `scrapy crawl` nodes,
the real CLI, a real redis-server)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_clustersync.node.control_follower import ControlFollower
from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import RedisFactory, SiteFactory
from support import (
    clustersync,
    marks,
    missing_pages,
    node_env,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

JOB = "site"  # the example spider's name, so the job's name
#: pages fetched at once by a node: with the site's delay, a crawl lasts long enough to steer
SLOW = {"CONCURRENT_REQUESTS_PER_DOMAIN": "4", "CONCURRENT_REQUESTS": "4"}
ERROR_LINE = re.compile(r"\] ERROR: ")


def status(url: str) -> dict[str, Any]:
    answer = clustersync(url, "status", JOB, "--json")
    assert answer.returncode == 0, answer.stderr
    result: dict[str, Any] = json.loads(answer.stdout)
    return result


def paused_at(server: RedisServer) -> float:
    """When Redis recorded the job's last control change, on time.monotonic()'s clock."""
    since_ms = int(server.client().hget(f"clustersync:{{{JOB}}}:meta", "control_ms") or 0)
    return since_ms / 1000 - (time.time() - time.monotonic())


def last_hit(web: TestSite, agents: list[str]) -> float:
    """time.monotonic() of the last page any of ``agents`` fetched (the site's clock)."""
    return max(web.agent_hits(agent).last or 0.0 for agent in agents)


def first_hit_after(web: TestSite, agents: list[str], moment: float) -> float:
    return min(t for agent in agents for t in web.agent_hits(agent).times if t > moment)


def hits_after(web: TestSite, agents: list[str], moment: float) -> int:
    return sum(sum(t > moment for t in web.agent_hits(agent).times) for agent in agents)


@pytest.mark.timing
def test_pause_stops_fetching_on_every_node_within_a_second_and_resume_finishes_the_crawl(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow site
    web = site(400, delay_s=0.1)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, SLOW)
    names = [node.name for node in nodes]
    wait_until(lambda: all(web.agent_hits(n).hits for n in names) and pages_fetched(web) > 60,
               30, "both nodes to crawl")
    # when the job is paused
    asked = time.monotonic()
    paused = clustersync(redis_server.url, "pause", JOB)
    applied = time.monotonic()
    assert paused.returncode == 0, paused.stderr
    assert "paused job 'site'" in paused.stdout
    time.sleep(4)
    # then every node stopped fetching within 1 s of the pause (requests under way finished),
    # measured from the moment Redis recorded it (control_ms, server time) on the site's clock
    pause_at = paused_at(redis_server)
    stopped_after_s = last_hit(web, names) - pause_at
    per_node = {n: round((web.agent_hits(n).last or 0) - pause_at, 3) for n in names}
    print(f"\npause: last page fetched {stopped_after_s:.3f}s after Redis recorded the pause "
          f"(per node: {per_node}); the CLI took {applied - asked:.2f}s in all; "
          f"{pages_fetched(web)} of {web.pages} pages fetched before the pause")
    assert stopped_after_s < 1.0
    # and nothing at all was fetched for the seconds after that, with the nodes still open
    quiet_from = pause_at + 1.0
    assert hits_after(web, names, quiet_from) == 0
    assert all(node.process.poll() is None for node in nodes)
    report = status(redis_server.url)
    assert report["state"] == "paused" and report["queued"] + report["leased"] > 0
    # when it is resumed
    resumed = clustersync(redis_server.url, "resume", JOB)
    assert resumed.returncode == 0 and "resumed job 'site'" in resumed.stdout, resumed.stderr
    again = time.monotonic()
    # then the crawl goes on and finishes with every page fetched exactly once
    wait_all(nodes, timeout_s=60)
    print(f"resume: first page fetched {first_hit_after(web, names, again) - again:.3f}s "
          "after the CLI returned")
    assert [node.process.returncode for node in nodes] == [0, 0]
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)
    assert all("is paused (`clustersync pause`)" in node.log() for node in nodes)


def test_stop_closes_every_node_and_a_later_run_continues_the_queue(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling a slow site
    web = site(300, delay_s=0.1)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, SLOW)
    wait_until(lambda: pages_fetched(web) > 40, 30, "the crawl to get going")
    # when the job is stopped
    stopped = clustersync(redis_server.url, "stop", JOB)
    assert stopped.returncode == 0 and "stopping job 'site'" in stopped.stdout, stopped.stderr
    asked = time.monotonic()
    wait_all(nodes, timeout_s=30)
    closed_s = time.monotonic() - asked
    first_run = pages_fetched(web)
    # then every node closed with clustersync_stopped, said so in one ERROR line, exited non-zero
    for node in nodes:
        log = node.log()
        assert node.finish_reason() == "clustersync_stopped", log[-3000:]
        assert node.process.returncode != 0
        errors = [line for line in log.splitlines() if ERROR_LINE.search(line)]
        assert len(errors) == 1 and "was stopped (`clustersync stop`)" in errors[0], log[-3000:]
    # and the job is stopped with the rest of its queue kept, nothing leased
    report = status(redis_server.url)
    print(f"\nstop: nodes closed {closed_s:.2f}s after the CLI returned; {first_run} of "
          f"{web.pages} pages fetched; {report['queued']} queued, {report['leased']} leased")
    assert report["state"] == "stopped" and report["control"] == "stopped"
    meta = redis_server.client().hget(f"clustersync:{{{JOB}}}:meta", "control")
    assert meta == b"stopped"  # the last node to leave settled the stop
    assert report["queued"] > 0 and report["leased"] == 0 and first_run < web.pages
    # when it is resumed and crawled again
    resumed = clustersync(redis_server.url, "resume", JOB)
    assert resumed.returncode == 0 and "runs again" in resumed.stdout, resumed.stderr
    web.delay_s = 0.0
    later = start_nodes(2, redis_server.url, web.start_url, tmp_path / "later", None)
    wait_all(later, timeout_s=60)
    # then the later run finishes it, and both runs together fetched every page exactly once
    assert [node.process.returncode for node in later] == [0, 0]
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)


def test_a_node_started_on_a_paused_job_waits_and_crawls_once_resumed(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a paused job
    web = site(30)
    assert clustersync(redis_server.url, "seed", JOB, "--create", web.start_url).returncode == 0
    assert clustersync(redis_server.url, "pause", JOB).returncode == 0
    # when a node starts on it
    node = start_node("late", redis_server.url, web.start_url, tmp_path)
    wait_until(lambda: "is paused" in node.log(), 30, "the node to say the job is paused")
    time.sleep(2)
    # then it says so, fetches nothing and waits
    assert pages_fetched(web) == 0 and node.process.poll() is None
    # and once the job is resumed it crawls every page and finishes
    assert clustersync(redis_server.url, "resume", JOB).returncode == 0
    wait_all([node], timeout_s=60)
    assert node.process.returncode == 0 and node.finish_reason() == "finished"
    assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)


def test_a_node_started_on_a_stopped_job_says_how_to_continue_it_and_exits_non_zero(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a stopped job (no node ran it: stopped at once)
    web = site(10)
    assert clustersync(redis_server.url, "seed", JOB, "--create", web.start_url).returncode == 0
    stopped = clustersync(redis_server.url, "stop", JOB)
    assert stopped.returncode == 0 and "stopped job 'site'" in stopped.stdout
    # when a node starts on it
    node = start_node("late", redis_server.url, web.start_url, tmp_path)
    wait_all([node], timeout_s=60)
    # then it fetches nothing, says when it was stopped and how to continue, and exits non-zero
    log = node.log()
    errors = [line for line in log.splitlines() if ERROR_LINE.search(line)]
    assert len(errors) == 1 and "job 'site' was stopped at" in errors[0], log[-3000:]
    assert "`clustersync resume site`" in errors[0] and "Traceback" not in log
    assert node.finish_reason() == "clustersync_stopped" and node.process.returncode != 0
    assert pages_fetched(web) == 0
    assert status(redis_server.url)["state"] == "stopped"


def test_control_commands_refuse_an_unknown_job_and_transitions_that_make_no_sense(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    url = redis_server.url
    # an unknown job: exit 3, as every command
    for command in ("pause", "resume", "stop"):
        answer = clustersync(url, command, "nosuchjob")
        assert answer.returncode == 3 and "does not exist" in answer.stderr, command
    # a running job: resume is a no-op that says so; pause twice says it already is
    assert clustersync(url, "seed", JOB, "--create", "http://127.0.0.1:9/a").returncode == 0
    answer = clustersync(url, "resume", JOB)
    assert answer.returncode == 0 and "already running" in answer.stdout
    assert clustersync(url, "pause", JOB).returncode == 0
    answer = clustersync(url, "pause", JOB)
    assert answer.returncode == 0 and "already paused" in answer.stdout
    # a stopped job cannot be paused; stopping it again says it already is
    assert clustersync(url, "stop", JOB).returncode == 0
    answer = clustersync(url, "pause", JOB)
    assert answer.returncode == 1 and "cannot be paused" in answer.stderr
    answer = clustersync(url, "stop", JOB)
    assert answer.returncode == 0 and "already stopped" in answer.stdout
    # a finished job: nothing to pause, stop or resume (exit 1, with how to crawl it again)
    web = site(3)
    node = start_node("done", url, web.start_url, tmp_path, {"CLUSTERSYNC_JOB": "small"})
    wait_all([node], timeout_s=60)
    assert node.process.returncode == 0
    for command in ("pause", "stop", "resume"):
        answer = clustersync(url, command, "small")
        assert answer.returncode == 1, (command, answer.stdout)
        assert "has finished" in answer.stderr and "clustersync restart small" in answer.stderr


@pytest.mark.timing
def test_a_node_follows_the_control_state_again_after_redis_restarted(
    redis_factory: RedisFactory,
) -> None:
    # given a node following a job's control state on a Redis that keeps its data
    server = redis_factory(persistence=True)
    store = JobStore(make_client(server.url), JOB, node_id="cli", writes_seen=None)
    store.ensure_job()
    control = ControlFollower(store.control, JOB)  # run here as the node's Redis thread runs it
    control.follow(time.monotonic())
    # when Redis restarts (the node's subscription is cut) and the job is paused after it
    server.restart(down_s=1.0)
    store.set_control("pause")
    # then the node follows within a few seconds, having reconnected by itself
    took = wait_for_state(control, "paused", 10)
    print(f"\nafter a Redis restart the node followed the pause in {took:.2f}s")
    store.set_control("resume")
    took = wait_for_state(control, "running", 3)
    control.close()
    assert took < 1.0


def wait_for_state(control: ControlFollower, state: str, timeout_s: float) -> float:
    started = time.monotonic()

    def sees() -> bool:
        control.follow(time.monotonic())
        time.sleep(0.01)
        return control.state == state

    wait_until(sees, timeout_s, f"the node to see {state}")
    return time.monotonic() - started


# ---- control during start() ---------------------------------------------------------------------

def test_pause_and_stop_during_start_then_resume_and_a_new_run_fetch_every_page_once(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path,
    tmp_path: Path,
) -> None:
    # given a node running a slow start() (60 requests, 0.05 s apart)
    web = site(60)
    settings = {"PAGES": "60", "START_SLEEP": "0.05"}

    def node(name: str) -> Any:
        return start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                          project_dir=fault_project, spider="slowstart", env=node_env(tmp_path))

    first = node("first")
    wait_until(lambda: len(marks(tmp_path, "started")) >= 10, 60, "start() to be under way")
    # when the job is paused during start(), then stopped, then resumed, and a new node runs
    assert clustersync(redis_server.url, "pause", "slowstart").returncode == 0
    wait_until(lambda: "is paused" in first.log(), 30, "the node to apply the pause")
    assert clustersync(redis_server.url, "stop", "slowstart").returncode == 0
    first.wait(40)
    assert first.finish_reason() == "clustersync_stopped"
    fetched_in_first = pages_fetched(web)
    assert clustersync(redis_server.url, "resume", "slowstart").returncode == 0
    second = node("second")
    wait_all([second], timeout_s=60)
    # then the two runs fetched every page exactly once
    print(f"first run fetched {fetched_in_first}, start() marks {len(marks(tmp_path, 'started'))}"
          f", twice: {pages_fetched_twice(web)}")
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}
    assert second.finish_reason() == "finished"
