"""A node starting up stays alive through a long spool replay: the replay renews the deadline
its join set (node/liveness.py StartUpLiveness), so no other node declares it dead before its
first heartbeat."""

from __future__ import annotations

import time
from pathlib import Path

from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.liveness import StartUpLiveness
from scrapy_clustersync.node.spool import Spool
from scrapy_clustersync.node.thread_api import Undelivered
from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

from support import joined, push_op

JOB = "job"


def test_a_long_spool_replay_keeps_the_replaying_node_alive(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a spool of 30 batches, and a node that joined with a 1 s liveness
    writer, epoch = joined(redis_server, "writer")
    ops = [push_op(f"http://a/{i}", dont_filter=True) for i in range(30)]
    Spool(tmp_path, JOB).save("writer", epoch, Undelivered(ops=ops), batch_size=1)
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": redis_server.url, "CLUSTERSYNC_JOB": JOB,
        "CLUSTERSYNC_HEARTBEAT_INTERVAL": 0.1, "CLUSTERSYNC_NODE_DEAD_AFTER": 0.5}), "spider")
    client = make_client(redis_server.url)
    node = JobStore(client, JOB, config.node_id)
    liveness = StartUpLiveness(node, config)
    node.join_node(liveness.measured(0.0), claim=False)
    joined_deadline = float(redis_server.client().zscore(f"clustersync:{{{JOB}}}:nodes",
                                                         config.node_id) or 0)

    # when it replays the spool slowly (each batch takes 0.05 s), past its first deadline
    def store_for(node_id: str, seen: int) -> JobStore:
        return JobStore(client, JOB, node_id, writer.dedup, writes_seen=seen)

    def keep_alive() -> None:
        time.sleep(0.05)
        liveness.renew()

    sent = Spool(tmp_path, JOB).replay(epoch, store_for, keep_alive=keep_alive)
    # then every write was sent, and its deadline moved on with the replay
    assert sent == 30
    deadline = float(redis_server.client().zscore(f"clustersync:{{{JOB}}}:nodes",
                                                  config.node_id) or 0)
    assert deadline - joined_deadline >= 1000  # 1.5 s of replay: renewed, not left to lapse
