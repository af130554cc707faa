"""A job's life seen from its nodes: a finished job says so, is crawled again on purpose, and a
node that stops for a clustersync reason says why in one line and exits non-zero."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import RedisFactory, SiteFactory
from support import (
    clustersync,
    pages_fetched,
    pages_fetched_twice,
    start_node,
    start_nodes,
    wait_all,
)

ERROR_LINE = re.compile(r"\] ERROR: ")
#: no test here measures the idle close; each crawl to a job's end waited it out
QUICK_CLOSE = {"CLUSTERSYNC_IDLE_CLOSE_AFTER": "0.3"}


def _crawl(name: str, url: str, start_url: str, tmp_path: Path, **settings: str) -> tuple[int, str]:
    node = start_node(name, url, start_url, tmp_path, {**QUICK_CLOSE, **settings})
    wait_all([node], timeout_s=90)
    return node.wait(0), node.log()  # it has ended: its exit code


def _one_clean_error(log: str, text: str) -> None:
    errors = [line for line in log.splitlines() if ERROR_LINE.search(line)]
    assert len(errors) == 1 and text in errors[0], log[-4000:]
    assert "Traceback" not in log, log[-4000:]


def test_running_a_finished_job_again_says_when_it_finished_and_exits_non_zero(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job crawled to its end
    web = site(20)
    code, _ = _crawl("first", redis_server.url, web.start_url, tmp_path)
    assert code == 0 and pages_fetched(web) == 20
    # when a node of the same job runs again
    code, log = _crawl("again", redis_server.url, web.start_url, tmp_path)
    # then it fetches nothing, says when the job finished and how to crawl it again, closes
    # with its own reason and exits non-zero
    assert pages_fetched(web) == 20
    _one_clean_error(log, "job 'site' already finished at")
    assert "20 requests done" in log and "clustersync restart site" in log
    assert "CLUSTERSYNC_RECRAWL" in log
    assert "'finish_reason': 'clustersync_job_finished'" in log
    assert code != 0
    # and `clustersync status` says when and why it finished
    status = json.loads(clustersync(redis_server.url, "status", "site", "--json").stdout)
    assert status["state"] == "finished" and status["finished_at"]
    assert status["finished_reason"].startswith("queue empty, no lease out, 1 node(s) idle for")


def test_restart_keeping_the_seen_record_crawls_only_new_urls(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job crawled to its end, then restarted keeping what it has seen
    web = site(20)
    _crawl("first", redis_server.url, web.start_url, tmp_path)
    restarted = clustersync(redis_server.url, "restart", "site")
    assert restarted.returncode == 0, restarted.stderr
    # when a node runs the job again over the same site
    code, log = _crawl("again", redis_server.url, web.start_url, tmp_path)
    # then start() ran again, every URL was already seen: nothing is fetched, and it finished
    assert "this node runs the spider's start()" in log
    assert web.hits_by_agent().get("again", {}) == {}
    assert code == 0 and "'finish_reason': 'finished'" in log


def test_restart_forgetting_the_seen_record_crawls_every_page_again(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job crawled to its end
    web = site(20)
    _crawl("first", redis_server.url, web.start_url, tmp_path)
    # when it is restarted with --forget-seen (refused without --yes) and a node runs it again
    assert clustersync(redis_server.url, "restart", "site", "--forget-seen").returncode != 0
    restarted = clustersync(redis_server.url, "restart", "site", "--forget-seen", "--yes")
    assert restarted.returncode == 0, restarted.stderr
    code, _ = _crawl("again", redis_server.url, web.start_url, tmp_path)
    # then every page is fetched once more by the new run
    assert code == 0
    assert sum(web.hits_by_agent().get("again", {}).values()) == 20


def test_restart_refuses_a_job_with_live_nodes_or_work_unless_forced(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a job with one URL queued and no node
    seeded = clustersync(redis_server.url, "seed", "queued", "--create",
                          "http://127.0.0.1:9/a")
    assert seeded.returncode == 0, seeded.stderr
    # when it is restarted, then refused with what it holds; --force restarts it
    refused = clustersync(redis_server.url, "restart", "queued")
    assert refused.returncode != 0 and "1 queued" in refused.stderr
    assert clustersync(redis_server.url, "restart", "queued", "--force").returncode == 0
    assert clustersync(redis_server.url, "restart", "nosuchjob").returncode != 0


def test_recrawl_setting_restarts_a_finished_job_once_for_two_nodes_started_together(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job crawled to its end
    web = site(60)
    _crawl("first", redis_server.url, web.start_url, tmp_path)
    # when two nodes with CLUSTERSYNC_RECRAWL = "forget-seen" start together
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        {**QUICK_CLOSE, "CLUSTERSYNC_RECRAWL": "forget-seen"})
    wait_all(nodes)
    # then one restarted it and ran start(), and the new run fetched every page once
    logs = [node.log() for node in nodes]
    assert sum("this node runs the spider's start()" in log for log in logs) == 1
    assert sum("CLUSTERSYNC_RECRAWL = 'forget-seen' restarts it" in log for log in logs) == 1
    new_run = web.hits_by_agent()
    assert sum(sum(new_run.get(n.name, {}).values()) for n in nodes) == 60
    assert all(hits == 2 for hits in pages_fetched_twice(web).values())
    assert [node.process.returncode for node in nodes] == [0, 0]


def test_a_wrong_password_is_reported_as_such_in_one_line_with_a_non_zero_exit(
    redis_factory: RedisFactory, site: SiteFactory, tmp_path: Path
) -> None:
    # given a Redis that requires a password, and a node with the wrong one
    server = redis_factory(password="right")
    wrong = server.url.replace(":right@", ":wrong@")
    # when the node starts
    code, log = _crawl("node1", wrong, site(3).start_url, tmp_path)
    # then one ERROR line says Redis refused it and names the URL's user and password
    _one_clean_error(log, "refused this node")
    assert "user and password in CLUSTERSYNC_REDIS_URL" in log
    assert ":wrong@" not in log  # the password is never logged
    assert "'finish_reason': 'clustersync_redis_auth_refused'" in log
    assert code != 0


@pytest.mark.parametrize("runner", [
    {},  # Scrapy's default: AsyncCrawlerProcess on the asyncio reactor
    {"FORCE_CRAWLER_PROCESS": "True"},  # CrawlerProcess
    {"TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor"},
], ids=["async-runner", "crawler-process", "twisted-reactor"])
def test_an_unreachable_redis_stops_the_node_in_one_line_with_a_non_zero_exit(
    site: SiteFactory, tmp_path: Path, runner: dict[str, str]
) -> None:
    code, log = _crawl("node1", "redis://127.0.0.1:1/0", site(3).start_url, tmp_path, **runner)
    _one_clean_error(log, "cannot join job 'site' at redis://127.0.0.1:1/0")
    assert "'finish_reason': 'clustersync_redis_unreachable'" in log
    assert code != 0


def test_a_bad_setting_stops_the_node_in_one_line_with_a_non_zero_exit(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    code, log = _crawl("node1", redis_server.url, site(3).start_url, tmp_path,
                       CLUSTERSYNC_RECRAWL="sometimes")
    _one_clean_error(log, "CLUSTERSYNC_RECRAWL = 'sometimes' is not a recrawl mode")
    assert "Task exception was never retrieved" not in log
    assert "'finish_reason': 'clustersync_bad_setting'" in log
    assert code != 0


def test_the_log_tells_progress_why_the_job_finished_and_what_a_leaving_node_handed_back(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a slow site and a progress line every second
    web = site(40, delay_s=0.08)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      {"LOGSTATS_INTERVAL": "1", "CONCURRENT_REQUESTS": "2"})
    wait_all([node])
    log = node.log()
    # then the log says who ran start() and when it was exhausted, how the cluster progressed,
    # why the job finished and what the node handed back when it left
    assert "this node runs the spider's start()" in log
    assert "start() of job 'site' is exhausted on node" in log
    assert re.search(r"clustersync: cluster of job 'site': \d+ pages/min, \d+ queued, \d+ "
                     r"leased, 1 live node", log), log[-3000:]
    assert "clustersync: job 'site' finished: queue empty, no lease out" in log
    assert re.search(r"leaves job 'site': 0 leased requests handed back .*writes sent", log)
