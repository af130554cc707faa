"""The least-privilege users of docs/operations.md, created with exactly the lines written there:
a crawl as the crawler user passes with no command refused; that user cannot FLUSHALL, read a
key outside ``clustersync:*`` or purge a job; the operator user runs every CLI command."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import LOCALHOST, RedisServer

from acl_support import PASSWORDS, documented_lines, refusals, run_lines
from conftest import SiteFactory
from support import clustersync, missing_pages, pages_fetched, start_nodes, wait_all

#: what the operator runs against a crawled job (purge last: it deletes the job)
OPERATOR_COMMANDS = [
    "jobs", "status site", "status site --check", "nodes site", "check site", "failed site",
    "dead site", "tasks site", "readers site", "export site", "consume site --group g",
    "config get site", "config set site DOWNLOAD_DELAY 0.1", "config history site",
    "seed site http://127.0.0.1:1/x", "pause site", "resume site", "stop site",
    "restart site --force", "top site -n 1",
]


def create_user(server: RedisServer, user: str) -> str:
    """Run the documented lines of ``user`` on ``server``; the user's URL."""
    run_lines([server], user, documented_lines(user))
    return f"redis://{user}:{PASSWORDS[user]}@{LOCALHOST}:{server.port}/0"


@pytest.fixture
def crawled(redis_server: RedisServer, site: SiteFactory, tmp_path: Path) -> RedisServer:
    """A Redis with both users, on which two nodes crawled a site as the crawler user."""
    url = create_user(redis_server, "crawler")
    create_user(redis_server, "operator")
    web = site(80)
    nodes = start_nodes(2, url, web.start_url, tmp_path)
    wait_all(nodes)
    assert missing_pages(web) == [] and pages_fetched(web) >= 80
    assert [node.process.returncode for node in nodes] == [0, 0]
    return redis_server


def test_a_crawl_as_the_documented_crawler_user_has_no_command_refused(
    crawled: RedisServer,
) -> None:
    assert refusals([crawled]) == []


def test_the_crawler_user_cannot_flush_read_foreign_keys_or_purge(crawled: RedisServer) -> None:
    crawled.client().set("billing:invoice:1", "secret")
    crawler = redis.Redis.from_url(create_user(crawled, "crawler"))
    with pytest.raises(redis.exceptions.NoPermissionError):
        crawler.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        crawler.get("billing:invoice:1")
    # purge is refused before anything is deleted (exit 4: Redis refused this client)
    run = clustersync(create_user(crawled, "crawler"), "purge", "site", "--yes")
    assert run.returncode == 4, run.output
    assert JobStore(make_client(crawled.url), "site", "t").status().exists


def test_the_operator_user_runs_every_command_and_purges(crawled: RedisServer) -> None:
    url = create_user(crawled, "operator")
    crawled.client().acl_log_reset()
    for command in OPERATOR_COMMANDS:
        run = clustersync(url, *command.split())
        assert run.returncode == 0, f"{command}: {run.output}"
    assert refusals([crawled]) == []
    assert clustersync(url, "purge", "site", "--yes").returncode == 0
    assert not JobStore(make_client(crawled.url), "site", "t").status().exists
    assert refusals([crawled]) == []
