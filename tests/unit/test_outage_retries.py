"""After a failed call, a node's Redis thread tries again at once, heartbeat first: its
heartbeat must not come later than the other nodes' for a backoff or a retried write."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import fakeredis
from scrapy.settings import Settings

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import JobStore, Push, StoreUnavailable
from scrapy_clustersync.store.script_results import Heartbeat

from .thread_harness import NodeThread


class CutOnce(JobStore):
    """A store whose first flush fails as a dropped connection does; it records each call."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls: list[tuple[str, float]] = []
        self.cut = False

    def heartbeat(self, epoch: str, **kw: Any) -> Heartbeat:
        self.calls.append(("heartbeat", time.monotonic()))
        return super().heartbeat(epoch, **kw)

    def flush(self, epoch: str, batch: Sequence[Any], call_id: str) -> Any:
        self.calls.append(("flush", time.monotonic()))
        if not self.cut:
            self.cut = True
            raise StoreUnavailable("Connection closed by server.")
        return super().flush(epoch, batch, call_id)


def test_after_a_failed_write_the_next_try_begins_with_the_heartbeat() -> None:
    # given a node (heartbeats 1 s apart) that has just beat, and whose next write fails
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0",
        "CLUSTERSYNC_HEARTBEAT_INTERVAL": "1"}), "job")
    store = CutOnce(fakeredis.FakeRedis(), "job", config.node_id)
    epoch, _ = store.join(ttl_ms=60_000)
    node = NodeThread(store, config, epoch)
    node.start()
    node.wait_for(lambda _: any(call == "heartbeat" for call, _ in store.calls), 10)
    # when it sends a write, Redis drops the connection, and the node tries again
    node.submit(Push(b"\x01" * 20, 0, b"a request"))
    node.wait_for(lambda _: [call for call, _ in store.calls].count("flush") == 2, 10)
    node.close(unacked=[])
    # then its first call after the failure is its heartbeat, not the retried write
    failed_at = next(at for call, at in store.calls if call == "flush")
    after = [(call, at - failed_at) for call, at in store.calls if at > failed_at]
    print("calls after the failed write (s after it):", after)
    assert after[0][0] == "heartbeat"
