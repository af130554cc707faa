"""What a node checks when it joins: a Redis the guarantee does not hold on, and its settings."""

from __future__ import annotations

import logging

import fakeredis
import pytest
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.joining import warn_of_risks
from scrapy_clustersync.store import JobStore

JOB = "job"


class OldEvictingRedis(JobStore):
    def server_facts(self) -> tuple[tuple[int, ...], str]:
        return (6, 2, 0), "allkeys-lru"


def test_a_node_warns_of_a_redis_too_old_or_evicting_and_of_dedup_settings_it_cannot_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a node set up for exact dedup, joining a Bloom job on an old, evicting Redis
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": "redis://:secret@host:6379/0",
                  "CLUSTERSYNC_DEDUP": "exact"}), JOB)
    store = OldEvictingRedis(fakeredis.FakeRedis(), JOB, "n1")
    # when it joins
    with caplog.at_level(logging.WARNING):
        warn_of_risks(store, config)
    # then it warns of each, naming the fix, and never shows the password
    assert "version 6.2.0" in caplog.text and "7.0 or newer" in caplog.text
    assert "maxmemory-policy allkeys-lru" in caplog.text
    assert "dedup settings" in caplog.text
    assert "secret" not in caplog.text
