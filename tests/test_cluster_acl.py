"""The least-privilege users of docs/operations.md on a Redis Cluster (3 primaries with a
replica each), made on every server with the documented lines and the cluster's extra ones: two
nodes crawl as the crawler user with no command refused on any server, that user cannot
FLUSHALL, read a foreign key or purge, and the operator user reads and purges the job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_cluster import RedisClusterGroup, redis_cli_binary

from acl_support import PASSWORDS, documented_lines, refusals, run_lines
from conftest import SiteFactory, require_redis_server
from support import clustersync, missing_pages, pages_fetched, start_nodes, wait_all

JOB = "site"  # the example spider's name, so the job's name


def user_url(group: RedisClusterGroup, user: str) -> str:
    """The cluster's URL, as ``user``."""
    return group.url.replace("redis+cluster://", f"redis+cluster://{user}:{PASSWORDS[user]}@", 1)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterGroup]:
    """A cluster whose every server, replicas included, has both users."""
    require_redis_server()
    if redis_cli_binary() is None:
        pytest.skip("redis-cli not found: install it (apt-get install redis-server)")
    with RedisClusterGroup(tmp_path / "cluster") as group:
        for user in PASSWORDS:
            run_lines(group.servers, user,
                      documented_lines(user) + documented_lines(user, f"{user}-cluster"))
        yield group


def test_the_documented_users_crawl_and_operate_a_cluster_and_nothing_more(
    cluster: RedisClusterGroup, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two nodes crawling through the cluster as the crawler user
    web = site(60)
    crawler = user_url(cluster, "crawler")
    nodes = start_nodes(2, crawler, web.start_url, tmp_path)
    wait_all(nodes)
    # then they crawled every page, exited 0, and no server refused them anything
    assert missing_pages(web) == [] and pages_fetched(web) >= 60
    assert [node.process.returncode for node in nodes] == [0, 0]
    assert refusals(cluster.servers) == []
    # and the crawler user cannot flush, read a foreign key or purge the job
    admin = make_client(cluster.url)
    admin.set("billing:invoice:1", "secret")
    as_crawler = redis.RedisCluster.from_url(
        crawler.replace("redis+cluster://", "redis://").split(",")[0] + "/")
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_crawler.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_crawler.get("billing:invoice:1")
    assert clustersync(crawler, "purge", JOB, "--yes").returncode == 4
    assert JobStore(admin, JOB, "t").status().exists
    # and the operator user reads the job and purges it, refused nothing
    for server in cluster.servers:
        server.client().acl_log_reset()
    operator = user_url(cluster, "operator")
    for command in ("jobs", f"status {JOB}", f"check {JOB}", f"nodes {JOB}", f"purge {JOB} --yes"):
        run = clustersync(operator, *command.split())
        assert run.returncode == 0, f"{command}: {run.output}"
    assert refusals(cluster.servers) == []
    assert not JobStore(admin, JOB, "t").status().exists
