"""A job's partitions (CLUSTERSYNC_PARTITIONS): partition 0 is today's job, each other partition
has a hash tag of its own, and a site always maps to the same partition."""

from __future__ import annotations

import pytest
from redis.crc import key_slot
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig, ConfigError
from scrapy_clustersync.store.job_list import job_names
from scrapy_clustersync.store.keys import JobKeys, partition_of


def test_partition_zero_is_todays_job_key_for_key() -> None:
    today, zero = JobKeys("shop"), JobKeys("shop", 0)
    assert [zero.meta, zero.seen, zero.site("a.example")] == [
        "clustersync:{shop}:meta", "clustersync:{shop}:seen", today.site("a.example")]


def test_each_partition_has_its_own_hash_tag_and_keeps_it_for_every_key() -> None:
    parts = JobKeys("shop").partitions(4)
    assert [p.meta for p in parts] == [
        "clustersync:{shop}:meta", "clustersync:{shop/1}:meta", "clustersync:{shop/2}:meta",
        "clustersync:{shop/3}:meta"]
    for part in parts:
        assert {key_slot(k.encode()) for k in (part.meta, part.seen, part.queue,
                                               part.site("a.example"))} == {
            key_slot(part.meta.encode())}
    assert len({key_slot(p.meta.encode()) for p in parts}) == 4


def test_a_site_always_maps_to_one_partition_in_range() -> None:
    sites = [f"site{i}.example" for i in range(200)]
    first = [partition_of(site, 8) for site in sites]
    assert first == [partition_of(site, 8) for site in sites]
    assert set(first) == set(range(8))  # crc32 spreads 200 sites over all 8
    assert {partition_of(site, 1) for site in sites} == {0}



def test_more_than_one_partition_is_refused_for_now_saying_why() -> None:
    settings = Settings({"CLUSTERSYNC_REDIS_URL": "redis://h:1/0"})
    assert ClusterConfig.from_settings(settings, "s").partitions == 1
    settings.set("CLUSTERSYNC_PARTITIONS", 4)
    with pytest.raises(ConfigError, match="CLUSTERSYNC_PARTITIONS = 4: .*leave it at 1"):
        ClusterConfig.from_settings(settings, "s")
    settings.set("CLUSTERSYNC_PARTITIONS", 0)
    with pytest.raises(ConfigError, match="at least 1"):
        ClusterConfig.from_settings(settings, "s")


def test_a_partitions_meta_is_not_listed_as_a_job() -> None:
    import fakeredis

    client = fakeredis.FakeRedis()
    for part in JobKeys("shop").partitions(3):
        client.hset(part.meta, "epoch", "e")
    assert job_names(client) == ["shop"]
