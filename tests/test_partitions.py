"""A job split into partitions (CLUSTERSYNC_PARTITIONS > 1) on one redis-server: every hash tag
of the job on the same server, the fast way to check what the partitions change."""

from __future__ import annotations

import pytest

from scrapy_clustersync.store import StoreError, make_client
from scrapy_clustersync.store.job_store import job_partitions
from scrapy_clustersync.store.keys import PARTITIONS_FIELD, JobKeys
from testkit.redis_server import RedisServer


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
