"""What a node checks when it joins: a Redis the guarantee does not hold on, and its settings."""

from __future__ import annotations

import logging

import fakeredis
import pytest
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.joining import join_job, warn_of_risks
from scrapy_clustersync.store import JobStore
from scrapy_clustersync.store.control_state import ControlState

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


class SlowHandshakeRedis(JobStore):
    """Its connection takes 2 s to open (a far Redis: TCP, TLS, AUTH), by ``connect`` or by
    the first call, as redis-py opens it; each call is instant."""

    def __init__(self, *args: object, clock: list[float], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self.connected = False

    def connect(self) -> None:
        if not self.connected:
            self.clock[0] += 2.0
            self.connected = True

    def control_state(self) -> ControlState:
        self.connect()
        return super().control_state()


def test_the_join_counts_round_trips_not_the_connection_handshake_in_its_start_up_liveness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a node near Redis whose connection is slow to open (the clock moves only then)
    clock = [100.0]
    monkeypatch.setattr("scrapy_clustersync.node.joining.time.monotonic", lambda: clock[0])
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:6379/0",
        "CLUSTERSYNC_HEARTBEAT_INTERVAL": 0.5, "CLUSTERSYNC_NODE_DEAD_AFTER": 1.5}), JOB)
    server = fakeredis.FakeRedis()
    store = SlowHandshakeRedis(server, JOB, "n1", clock=clock)
    # when it joins
    join_job(store, config)
    # then its start-up liveness is the threshold plus the floor allowance (twice the
    # threshold), not ten times the 2 s handshake: a node killed while it starts is declared
    # dead in seconds
    deadline_ms = server.zscore(store.keys.nodes, "n1")
    now_ms = server.time()
    assert deadline_ms is not None
    assert deadline_ms - (now_ms[0] * 1000 + now_ms[1] // 1000) <= 3000 + 100
