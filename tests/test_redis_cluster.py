"""Nodes crawl through a Redis Cluster (``redis+cluster://``, 3 primaries with a replica each):
every page once, ``clustersync serve`` pauses and resumes them (the control channel is the
cluster's pub/sub) and reads the cluster's metrics, and ``clustersync status``, ``check`` and
``jobs`` read a job through the cluster's URL, whichever primary holds it."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_serve import ServeProcess, metric_samples

from scrapy_clustersync.store import make_client
from scrapy_clustersync.store.cluster_client import node_of
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.lease_script import LeaseScript
from scrapy_clustersync.store.node_calls import run_calls
from scrapy_clustersync.store.script_base import load_lua
from testkit.redis_cluster import RedisClusterGroup, redis_cli_binary
from testkit.redis_server import RedisServer

from conftest import SiteFactory, require_redis_server
from support import (
    clustersync,
    joined,
    missing_pages,
    pages_fetched,
    pages_fetched_twice,
    push_op,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

PAGES = 80
JOB = "site"  # the example spider's name, so the job's name


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterGroup]:
    require_redis_server()
    if redis_cli_binary() is None:
        pytest.skip("redis-cli not found: install it (apt-get install redis-server)")
    with RedisClusterGroup(tmp_path_factory.mktemp("cluster")) as group:
        yield group


def test_two_nodes_crawl_through_the_cluster_and_serve_pauses_and_resumes_them(
    redis_cluster: RedisClusterGroup, site: SiteFactory, tmp_path: Path,
) -> None:
    # given serve and two nodes whose CLUSTERSYNC_REDIS_URL is the cluster's
    web = site(PAGES, delay_s=0.05)
    with ServeProcess(redis_cluster.url, tmp_path) as serve:
        nodes = start_nodes(2, redis_cluster.url, web.start_url, tmp_path,
                            {"CONCURRENT_REQUESTS": "2"})
        wait_until(lambda: pages_fetched(web) >= 20, 30, "20 pages fetched")
        # when the job is paused over HTTP (the control channel: the cluster's pub/sub)
        paused = serve.http.post(f"/api/jobs/{JOB}/pause")
        assert paused.status_code == 200, paused.text
        time.sleep(1.0)
        at_pause = pages_fetched(web)
        time.sleep(1.5)
        # then the nodes fetch nothing more while it is paused
        assert pages_fetched(web) == at_pause < PAGES
        # and the metrics read the cluster
        samples = metric_samples(serve.http.get("/metrics").text)
        assert samples["clustersync_redis_up"] == [({}, 1.0)]
        assert samples["clustersync_redis_used_memory_bytes"][0][1] > 0
        assert samples["clustersync_job_queued"][0][0] == {"job": JOB}
        # when it is resumed, the crawl goes to its end
        assert serve.http.post(f"/api/jobs/{JOB}/resume").status_code == 200
        wait_all(nodes, timeout_s=90)
    # then every page was fetched exactly once and both nodes finished cleanly
    assert [node.process.returncode for node in nodes] == [0, 0]
    assert missing_pages(web) == []
    assert pages_fetched_twice(web) == {}
    # and status, read through the cluster URL, shows the finished job
    run = clustersync(redis_cluster.url, "status", JOB, "--json")
    assert run.returncode == 0, run.output
    status = json.loads(run.stdout)
    assert (status["queued"], status["leased"]) == (0, 0)
    assert status["counters"]["acked"] >= PAGES
    assert JOB in clustersync(redis_cluster.url, "jobs").stdout


def test_status_check_and_jobs_find_jobs_on_every_primary(
    redis_cluster: RedisClusterGroup,
) -> None:
    # given jobs whose keys hash to different primaries, one request queued in each
    client = make_client(redis_cluster.url)
    names, homes = [], set()
    for i in range(40):
        name = f"spread-{i}"
        home = node_of(client, JobKeys(name).meta)
        if (home.connection_pool.connection_kwargs["port"]) not in homes:
            homes.add(home.connection_pool.connection_kwargs["port"])
            names.append(name)
        if len(names) == 3:
            break
    assert len(homes) == 3
    for name in names:
        store, epoch = joined(redis_cluster.url, job=name)
        store.flush(epoch, [push_op(f"https://{name}.example/")], "call-1")
    # when the CLI lists, shows and checks them through the cluster URL
    listed = clustersync(redis_cluster.url, "jobs").stdout
    for name in names:
        shown = clustersync(redis_cluster.url, "status", name, "--json")
        checked = clustersync(redis_cluster.url, "check", name)
        # then each is found, with its request, whichever primary holds it
        assert name in listed
        assert shown.returncode == 0, shown.output
        assert json.loads(shown.stdout)["queued"] == 1
        assert checked.returncode == 0, checked.output


def test_a_bad_cluster_url_says_what_is_wrong(redis_cluster: RedisClusterGroup) -> None:
    run = clustersync("redis+cluster://127.0.0.1:7000/3", "jobs")
    assert run.returncode != 0
    assert "database 0 only" in run.output


def test_a_cluster_url_naming_a_plain_redis_says_so(redis_server: RedisServer) -> None:
    # given a redis+cluster:// URL that names a Redis without cluster mode
    url = f"redis+cluster://127.0.0.1:{redis_server.port}/"
    # then the command fails at once, saying what to use instead (no endless retry)
    run = clustersync(url, "status", "site")
    assert run.returncode != 0
    assert "must name nodes of a Redis Cluster" in run.output
    assert "redis://host:port/0" in run.output


def test_nodes_go_on_through_a_failover_of_the_jobs_primary_and_fetch_every_page(
    tmp_path: Path, site: SiteFactory,
) -> None:
    # given two nodes crawling through a cluster of their own
    require_redis_server()
    if redis_cli_binary() is None:
        pytest.skip("redis-cli not found: install it (apt-get install redis-server)")
    with RedisClusterGroup(tmp_path / "cluster") as group:
        web = site(150, delay_s=0.02)
        nodes = start_nodes(2, group.url, web.start_url, tmp_path, {"CONCURRENT_REQUESTS": "4"})
        wait_until(lambda: pages_fetched(web) >= 30, 60, "30 pages fetched")
        # when the primary that holds the job is killed (SIGKILL) and its replica promoted
        home = node_of(make_client(group.url), JobKeys(JOB).meta)
        port = home.connection_pool.connection_kwargs["port"]
        primary = next(each for each in group.servers if each.port == port)
        killed_at = pages_fetched(web)
        primary.kill()
        wait_until(lambda: len(group.primaries()) == 3, 60, "the replica to be promoted")
        wait_all(nodes, timeout_s=120)
    # then every page was fetched and both nodes finished with exit code 0
    assert missing_pages(web) == []
    assert [node.process.returncode for node in nodes] == [0, 0]
    # and the primary died mid-crawl: the nodes met it as an outage and went on
    assert killed_at < web.pages
    assert any("Redis is reachable again" in node.log() for node in nodes)
    rolled_back = sum("came back older than this node saw it" in node.log() for node in nodes)
    print(f"nodes that saw a rollback: {rolled_back}")


def test_a_node_over_http_and_one_over_the_cluster_crawl_one_job_every_page_once(
    redis_cluster: RedisClusterGroup, site: SiteFactory, tmp_path: Path,
) -> None:
    # given serve on the cluster, with a worker token, and a site
    job, web = "httpjob", site(PAGES, delay_s=0.02)
    made = clustersync(redis_cluster.url, "token", "add", "worker", "--role", "operator")
    assert made.returncode == 0, made.output
    token = next(word for word in made.stdout.split() if word.startswith("csk_"))
    settings = {"CLUSTERSYNC_JOB": job, "CONCURRENT_REQUESTS": "2"}
    with ServeProcess(redis_cluster.url, tmp_path) as serve:
        # when one node crawls through serve (its commands run on the cluster) and one directly
        over_http = start_node("httpnode", "", web.start_url, tmp_path, {
            **settings, "CLUSTERSYNC_URL": serve.base_url, "CLUSTERSYNC_TOKEN": token})
        wait_until(lambda: len(web.agent_hits("httpnode").times) > 5, 30, "the HTTP node")
        direct = start_node("direct", redis_cluster.url, web.start_url, tmp_path, settings)
        wait_all([over_http, direct], timeout_s=90)
    # then both finished, and every page was fetched exactly once
    assert [over_http.process.returncode, direct.process.returncode] == [0, 0]
    assert missing_pages(web) == [] and pages_fetched_twice(web) == {}


def test_serve_runs_a_nodes_script_load_on_the_cluster_then_its_evalsha(
    redis_cluster: RedisClusterGroup,
) -> None:
    # given a node's script, as an HTTP node loads it after NOSCRIPT (a failover, a restart)
    text = load_lua(LeaseScript.FILE, *LeaseScript.HELPERS)
    sha = hashlib.sha1(text.encode()).hexdigest()
    client = make_client(redis_cluster.url)
    # when serve runs SCRIPT LOAD and a call of it in one batch, as a transaction or not
    for transaction in (False, True):
        replies = run_calls(client, [["SCRIPT", "LOAD", text],
                                     ["HSET", JobKeys("loadjob").meta, "x", "1"]], transaction)
        # then the script is loaded (its SHA answered) and the rest ran in its place
        assert replies[0] == [0, sha] and replies[1][0] == 0
    assert node_of(client, JobKeys("loadjob").meta).script_exists(sha) == [True]
