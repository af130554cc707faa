"""A job split into partitions (CLUSTERSYNC_PARTITIONS > 1) on one redis-server: every hash tag
of the job on the same server, the fast way to check what the partitions change."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, StoreError, make_client
from scrapy_clustersync.store.job_store import job_partitions, join_partitions
from scrapy_clustersync.store.keys import PARTITIONS_FIELD, JobKeys
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import missing_pages, pages_fetched_twice, start_nodes


def test_a_job_without_a_recorded_partition_count_has_one_partition(
        redis_server: RedisServer) -> None:
    # given a job that does not exist, and one whose meta holds no partition count
    client = make_client(redis_server.url)
    client.hset(JobKeys("old").meta, "epoch", "e1")
    # then both have one partition; a recorded count is read as it is
    assert job_partitions(client, "new") == 1
    assert job_partitions(client, "old") == 1
    client.hset(JobKeys("split").meta, PARTITIONS_FIELD, "3")
    assert job_partitions(client, "split") == 3


def test_a_partition_count_that_is_no_count_is_a_clear_error(redis_server: RedisServer) -> None:
    client = make_client(redis_server.url)
    client.hset(JobKeys("bad").meta, PARTITIONS_FIELD, "x")
    with pytest.raises(StoreError, match="partition count"):
        job_partitions(client, "bad")


@pytest.mark.parametrize("setting", [None, "1"])
def test_a_node_refuses_a_job_of_another_partition_count_with_a_clear_line_and_exit_code(
        redis_server: RedisServer, site: SiteFactory, tmp_path: Path, setting: str | None) -> None:
    # given a job "site" recorded as split into 3 partitions
    web = site(3)
    client = make_client(redis_server.url)
    client.hset(JobKeys("site").meta, mapping={PARTITIONS_FIELD: "3", "epoch": "e1"})
    # when a node is started on it, with CLUSTERSYNC_PARTITIONS unset (it follows the job) or
    # set to another count
    settings = {} if setting is None else {"CLUSTERSYNC_PARTITIONS": setting}
    node = start_nodes(1, redis_server.url, web.start_url, tmp_path, settings)[0]
    code = node.wait(60)
    # then it fetches nothing, joins nothing and stops non-zero, saying why in one line
    assert code != 0 and pages_fetched_twice(web) == {} and len(missing_pages(web)) == 3
    assert node.finish_reason() == "clustersync_partitions_differ"
    line = next(line for line in node.log().splitlines() if "split into 3 partition" in line)
    assert "ERROR" in line
    if setting is not None:
        assert "CLUSTERSYNC_PARTITIONS is 1" in line
    assert client.zcard(JobKeys("site").nodes) == 0


def test_the_partition_count_is_recorded_once_when_the_job_is_created(
        redis_server: RedisServer) -> None:
    # given a job no node created yet, and one created without a count
    client = make_client(redis_server.url)
    new, old = JobStore(client, "new", "n1"), JobStore(client, "old", "n1")
    old.ensure_job()
    # when nodes with different counts record theirs
    first, second = new.record_partitions(3), new.record_partitions(5)
    # then the first count is the job's, the later node learns it, and a job that exists
    # without a count keeps its one partition
    assert (first, second) == (3, 3) and job_partitions(client, "new") == 3
    assert old.record_partitions(3) == 1 and job_partitions(client, "old") == 1
    new.ensure_job()  # the join that creates the job keeps the count
    assert job_partitions(client, "new") == 3


def test_every_partition_is_joined_as_a_job_of_its_own_with_the_jobs_dedup_settings(
        redis_server: RedisServer) -> None:
    # given a node that joined partition 0 of a job of 3 partitions, created in exact dedup
    client = make_client(redis_server.url)
    store = JobStore(client, "split", "n1", DedupSettings("exact"))
    epoch, _ = store.join(ttl_ms=10_000)
    # when it joins the other partitions (one round trip), and a second node does the same
    joined = join_partitions(store, 3)
    again = join_partitions(JobStore(client, "split", "n2"), 3)
    # then each partition has its own epoch under its own hash tag, the same for both nodes,
    # the job's dedup settings, its own write counter, and no node liveness or start() claim
    assert [each.keys.partition for each, _ in joined] == [1, 2]
    epochs = [partition_epoch for _, partition_epoch in joined]
    assert len({epoch, *epochs}) == 3 and epochs == [e for _, e in again]
    for each, partition_epoch in joined:
        meta = client.hgetall(JobKeys("split", each.keys.partition).meta)
        assert meta[b"epoch"] == partition_epoch.encode() and meta[b"dedup"] == b"exact"
        assert b"start_claim" not in meta and each.writes_seen == 0
        assert client.zcard(JobKeys("split", each.keys.partition).nodes) == 0
    assert join_partitions(store, 1) == []
