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
from scrapy_clustersync.store.round_trip import RoundTrip

from .thread_harness import NodeThread


class CutOnce(JobStore):
    """A store whose first round trip with a write in it fails as a dropped connection does;
    it records the calls of every round trip, in order, and when it was sent."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.trips: list[tuple[list[str], float]] = []
        self.cut = False

    def round_trip(self) -> RoundTrip:
        return Recorded(self)

    def heartbeat_in(self, trip: RoundTrip, epoch: str, beat: Any) -> Any:
        assert isinstance(trip, Recorded)
        trip.calls.append("heartbeat")
        return super().heartbeat_in(trip, epoch, beat)

    def flush_in(self, trip: RoundTrip, epoch: str, ops: Sequence[Any], call_id: str) -> Any:
        assert isinstance(trip, Recorded)
        trip.calls.append("flush")
        return super().flush_in(trip, epoch, ops, call_id)

    def calls(self) -> list[str]:
        return [call for calls, _ in self.trips for call in calls]


class Recorded(RoundTrip):
    def __init__(self, store: CutOnce) -> None:
        super().__init__(store.client)
        self.store = store
        self.calls: list[str] = []

    def send(self) -> None:
        store = self.store
        store.trips.append((self.calls, time.monotonic()))
        if "flush" in self.calls and not store.cut:
            store.cut = True
            raise StoreUnavailable("Connection closed by server.")
        super().send()


def test_after_a_failed_write_the_next_try_begins_with_the_heartbeat() -> None:
    # given a node (heartbeats 1 s apart) that has just beat, and whose next write fails
    config = ClusterConfig.from_settings(Settings({
        "CLUSTERSYNC_REDIS_URL": "redis://127.0.0.1:1/0",
        "CLUSTERSYNC_HEARTBEAT_INTERVAL": "1"}), "job")
    store = CutOnce(fakeredis.FakeRedis(), "job", config.node_id)
    epoch, _ = store.join(ttl_ms=60_000)
    node = NodeThread(store, config, epoch)
    node.start()
    node.wait_for(lambda _: "heartbeat" in store.calls(), 10)
    # when it sends a write, Redis drops the connection, and the node tries again
    node.submit(Push(b"\x01" * 20, 0, b"a request"))
    node.wait_for(lambda _: store.calls().count("flush") == 2, 10)
    node.close(unacked=[])
    # then its first round trip after the failure begins with its heartbeat, ahead of the
    # retried write
    failed_at = next(at for calls, at in store.trips if "flush" in calls)
    after = [(calls, at - failed_at) for calls, at in store.trips if at > failed_at]
    print("round trips after the failed write (s after it):", after)
    assert after[0][0][0] == "heartbeat"
