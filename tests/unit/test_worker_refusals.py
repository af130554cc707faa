"""The Redis thread never lets one write it cannot send hold back the writes after it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import fakeredis
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import Ack, JobStore, Push
from scrapy_clustersync.store.write_ops import Arg

from .thread_harness import NodeThread


@dataclass(frozen=True)
class UnencodablePush(Push):
    """A push whose arguments cannot be built (a bug elsewhere, or a value of a new kind)."""

    def args(self) -> list[Arg]:
        raise TypeError("int() argument must be a string, not 'object'")


def test_a_write_that_cannot_be_encoded_is_dead_lettered_and_the_writes_after_it_go_out(
    tmp_path: Path,
) -> None:
    # given a node whose Redis thread holds a write it cannot encode, then good writes
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0"}), "job")
    store = JobStore(fakeredis.FakeRedis(), "job", config.node_id)
    epoch, _ = store.join(ttl_ms=60_000)
    node = NodeThread(store, config, epoch)
    node.link.submit(UnencodablePush(b"\x01" * 20, 0, b"bad request"))
    node.link.submit(Push(b"\x02" * 20, 0, b"good request"))
    node.link.submit(Ack("00000000000000011234abcd"))
    # when it sends them and closes
    node.start()
    undelivered = node.close(unacked=[])
    # then everything reached Redis: the bad write as a dead letter, the good one queued
    assert not undelivered
    status = store.status()
    assert status.queued == 1 and status.dead_letters == 1
    [letter] = store.dead_letters()
    assert "cannot be encoded" in letter.reason and letter.entry == b"bad request"
