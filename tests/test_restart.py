"""`clustersync restart` with real nodes: a stopped job is running again after it (the next node
crawls instead of stopping at once), and a restart keeping the seen record fetches again exactly
the start requests marked dont_filter, nothing else."""

from __future__ import annotations

from pathlib import Path

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import clustersync, start_node, wait_all

QUICK_CLOSE = {"CLUSTERSYNC_IDLE_CLOSE_AFTER": "0.3"}


def _crawl(name: str, url: str, start_url: str, tmp_path: Path,
           **settings: str) -> tuple[int, str]:
    node = start_node(name, url, start_url, tmp_path, {**QUICK_CLOSE, **settings})
    wait_all([node], timeout_s=90)
    return node.process.wait(), node.log()


def test_restart_of_a_stopped_job_resumes_it_and_the_next_node_crawls(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a job crawled to its end, restarted, then stopped before any node ran it
    web = site(10)
    code, _ = _crawl("first", redis_server.url, web.start_url, tmp_path)
    assert code == 0
    assert clustersync(redis_server.url, "restart", "site").returncode == 0
    stopped = clustersync(redis_server.url, "stop", "site")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.output
    # when it is restarted (forgetting what it saw) and a node runs it
    restarted = clustersync(redis_server.url, "restart", "site", "--forget-seen", "--yes")
    code, log = _crawl("again", redis_server.url, web.start_url, tmp_path)
    # then the restart said it resumed the job, and the node crawled every page once more
    assert restarted.returncode == 0 and "it was stopped and runs again" in restarted.stdout
    assert code == 0 and "'finish_reason': 'finished'" in log, log[-3000:]
    assert sum(web.hits_by_agent().get("again", {}).values()) == 10


def test_a_restart_keeping_the_seen_record_fetches_again_only_dont_filter_start_requests(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a job crawled to its end by a spider whose start request is dont_filter (as
    # Scrapy's start_urls are), then restarted keeping its seen record
    web = site(20)
    start = {"START_DONT_FILTER": "True"}
    _crawl("first", redis_server.url, web.start_url, tmp_path, **start)
    restarted = clustersync(redis_server.url, "restart", "site")
    assert "start requests marked dont_filter (start_urls) are fetched again" in restarted.stdout
    # when a node runs the job again over the same site
    code, _ = _crawl("again", redis_server.url, web.start_url, tmp_path, **start)
    # then it fetched the start page once more, and no page its links lead to
    assert code == 0
    assert web.hits_by_agent().get("again", {}) == {web.page_path(0): 1}
