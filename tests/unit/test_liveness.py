"""The liveness a node asks for (node/liveness.py): the threshold, plus its start-up at the join
and a few of its own round trips at each heartbeat, both bounded."""

from __future__ import annotations

from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.liveness import START_UP_MAX_S, heartbeat_ttl_ms, start_up_ttl_ms


def config(dead_after_s: float = 1.5) -> ClusterConfig:
    return ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:6379/0", "CLUSTERSYNC_HEARTBEAT_INTERVAL": 0.5,
        "CLUSTERSYNC_NODE_DEAD_AFTER": dead_after_s}), "spider")


def test_a_node_near_redis_is_given_the_threshold_at_each_heartbeat_and_twice_it_at_the_join(
) -> None:
    assert heartbeat_ttl_ms(config(), 0.001) == 1508
    assert start_up_ttl_ms(config(), 0.001) == 3000


def test_a_far_node_is_given_its_round_trips_more_at_the_join_and_at_each_heartbeat() -> None:
    # 0.4 s round trips: ten at the join (on top of the threshold), eight at each heartbeat
    assert start_up_ttl_ms(config(), 0.4) == 1500 + 4000
    assert heartbeat_ttl_ms(config(), 0.4) == 1500 + 3200


def test_a_slow_redis_does_not_make_a_node_immortal() -> None:
    assert heartbeat_ttl_ms(config(), 10.0) == 1500 + 3 * 1500
    assert start_up_ttl_ms(config(), 60.0) == int((1.5 + START_UP_MAX_S) * 1000)
