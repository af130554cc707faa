"""A job split into partitions, as ``clustersync status``, ``jobs`` and ``purge`` show it: its
figures are the sums of its partitions', each partition is listed (on a Redis Cluster with the
primary it is on), and purge deletes every partition's keys; on one redis-server and on a
3-master cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_serve import ServeProcess, metric_samples

from scrapy_clustersync.store import JobStore, Push, make_client
from scrapy_clustersync.store.keys import PARTITIONS_FIELD, JobKeys, partition_of
from scrapy_clustersync.store.records import as_text
from testkit.redis_cluster import RedisClusterGroup, redis_cli_binary
from testkit.redis_server import RedisServer

from conftest import require_redis_server
from support import CODEC, FINGERPRINTER, clustersync

JOB = "split"
PARTITIONS = 3
SITES = [f"site{i}.example" for i in range(12)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterGroup]:
    require_redis_server()
    if redis_cli_binary() is None:
        pytest.skip("redis-cli not found: install it (apt-get install redis-server)")
    with RedisClusterGroup(tmp_path_factory.mktemp("cluster"), replicas_per_master=0) as group:
        yield group


def partition_store(url: str, partition: int) -> JobStore:
    """The store of one partition of JOB: a partition's keys are those of a job named by its
    tag (keys.py), so today's JobStore reads and writes them."""
    return JobStore(make_client(url), JobKeys(JOB, partition).tag, "n1")


def push(url: str) -> Push:
    from scrapy import Request

    request = Request(url)
    return Push(FINGERPRINTER.fingerprint(request), 0, CODEC.encode(request), 0,
                url.split("/")[2])


def split_job(url: str) -> dict[int, tuple[int, int]]:
    """JOB in PARTITIONS partitions, each site's requests in its partition, one lease taken
    in each; returns each partition's (queued, leased)."""
    expected = {}
    for p in range(PARTITIONS):
        store = partition_store(url, p)
        epoch, _ = store.join(ttl_ms=120_000)
        sites = [site for site in SITES if partition_of(site, PARTITIONS) == p]
        store.flush(epoch, [push(f"https://{site}/{n}") for site in sites for n in range(2)],
                    f"fill-{p}")
        leased = store.lease(epoch, 1, 60_000, f"lease-{p}")
        expected[p] = (2 * len(sites) - len(leased), len(leased))
    make_client(url).hset(JobKeys(JOB).meta, PARTITIONS_FIELD, PARTITIONS)
    return expected


def assert_status_sums_partitions(url: str, expected: dict[int, tuple[int, int]],
                                  on_cluster: bool) -> None:
    shown = clustersync(url, "status", JOB, "--json")
    assert shown.returncode == 0, shown.output
    status = json.loads(shown.stdout)
    assert status["queued"] == sum(q for q, _ in expected.values())
    assert status["leased"] == sum(leased for _, leased in expected.values()) == PARTITIONS
    assert status["seen"] == 2 * len(SITES)
    assert {each["partition"]: (each["queued"], each["leased"])
            for each in status["partitions"]} == expected
    assert all(each["bytes"] > 0 for each in status["partitions"])
    assert all(bool(each["primary"]) == on_cluster for each in status["partitions"])
    text = clustersync(url, "status", JOB).stdout
    assert f"partitions   {PARTITIONS}" in text
    for p, (queued, leased) in expected.items():
        assert f"{p:>3}  queued {queued:>10,}  leased {leased:>8,}" in text
    rows = json.loads(clustersync(url, "jobs", "--json").stdout)
    assert [(row["job"], row["queued"]) for row in rows] == [(JOB, status["queued"])]


def assert_check_finds_and_mends_a_lease_in_the_last_partition(url: str) -> None:
    # given a job whose every invariant holds
    assert clustersync(url, "check", JOB).returncode == 0
    # when a lease of the last partition loses its deadline
    last = JobKeys(JOB, PARTITIONS - 1)
    client = make_client(url)
    entry_id = as_text(client.zrange(last.deadlines, 0, -1)[0])
    client.zrem(last.deadlines, entry_id)
    # then check finds it there, and repair returns it to its partition's queue
    found = json.loads(clustersync(url, "check", JOB, "--json").stdout)
    assert [(f["kind"], f.get("partition")) for f in found["findings"]] == [
        ("lease_without_deadline", PARTITIONS - 1)]
    assert clustersync(url, "check", JOB, "--repair").returncode == 0
    assert clustersync(url, "check", JOB).returncode == 0
    assert client.hlen(last.leased) == 0


def assert_purge_removes_every_partition(url: str) -> None:
    purged = clustersync(url, "purge", JOB, "--yes")
    assert purged.returncode == 0, purged.output
    client = make_client(url)
    assert list(client.scan_iter(match="clustersync:*")) == []


def test_a_split_job_on_one_redis_shows_its_partitions_and_purge_removes_them(
    redis_server: RedisServer, tmp_path: Path,
) -> None:
    expected = split_job(redis_server.url)
    assert_status_sums_partitions(redis_server.url, expected, on_cluster=False)
    sites = json.loads(clustersync(redis_server.url, "status", JOB, "--sites", "50",
                                   "--json").stdout)["sites"]
    assert sites["queue"]["queued"] == sum(q for q, _ in expected.values())
    assert len(sites["queue"]["deepest"]) == len(SITES)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        status = serve.http.get(f"/api/jobs/{JOB}").json()
        samples = metric_samples(serve.http.get("/metrics").text)
    assert [each["queued"] for each in status["partitions"]] == [q for q, _ in
                                                                 expected.values()]
    assert samples["clustersync_job_queued"] == [({"job": JOB}, float(status["queued"]))]
    assert sorted((labels["partition"], value) for labels, value in
                  samples["clustersync_partition_leased"]) == [
        (str(p), float(leased)) for p, (_, leased) in expected.items()]
    assert_check_finds_and_mends_a_lease_in_the_last_partition(redis_server.url)
    assert_purge_removes_every_partition(redis_server.url)


def test_a_split_job_on_a_cluster_shows_each_partitions_primary_and_purge_removes_them(
    cluster: RedisClusterGroup,
) -> None:
    expected = split_job(cluster.url)
    assert_status_sums_partitions(cluster.url, expected, on_cluster=True)
    text = clustersync(cluster.url, "status", JOB).stdout
    assert text.count("primary 127.0.0.1:") == PARTITIONS
    assert_check_finds_and_mends_a_lease_in_the_last_partition(cluster.url)
    assert_purge_removes_every_partition(cluster.url)
