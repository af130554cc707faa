"""A node's real Redis thread driven by a test: the test thread stands for the reactor.

``SyncWorker`` hands everything to the reactor with ``reactor.callFromThread``; here those calls
queue in a ``ManualReactor`` and run on the test thread when it ``pump``s, as the reactor would
run them, so a test sees the node exactly as the scheduler does (through ``NodeLink``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.node.reactor_link import NodeLink
from scrapy_clustersync.node.redis_thread import SyncWorker
from scrapy_clustersync.node.thread_api import Undelivered
from scrapy_clustersync.store import JobStore, Op

Call = tuple[Callable[..., object], tuple[Any, ...]]


class ManualReactor:
    """Calls scheduled from the Redis thread, run when the test thread says so."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Call] = queue.SimpleQueue()

    def call_from_thread(self, function: Callable[..., object], *args: Any) -> None:
        self._calls.put((function, args))

    def run(self) -> int:
        """Run every call scheduled so far; returns how many ran."""
        ran = 0
        while True:
            try:
                function, args = self._calls.get_nowait()
            except queue.Empty:
                return ran
            function(*args)
            ran += 1


class NodeThread:
    """A ``SyncWorker`` and its ``NodeLink``, the test thread acting as the reactor."""

    def __init__(self, store: JobStore, config: ClusterConfig, epoch: str,
                 node_info: Callable[[], dict[str, Any]] = dict, start_state: str = "none",
                 on_leased: Callable[[], None] = lambda: None) -> None:
        self.reactor = ManualReactor()
        self.worker = SyncWorker(store, config, epoch, node_info, on_leased, start_state,
                                 self.reactor.call_from_thread)
        self.link: NodeLink = self.worker.link

    def start(self) -> None:
        self.link.start()

    def pump(self) -> None:
        """Let the "reactor" run what the Redis thread handed it so far."""
        self.reactor.run()

    def wait_for(self, condition: Callable[[NodeLink], bool], timeout_s: float) -> float:
        """Pump until ``condition(link)`` holds; returns how long it took."""
        began = time.monotonic()
        while True:
            self.pump()
            if condition(self.link):
                return time.monotonic() - began
            assert time.monotonic() - began < timeout_s, "timed out"
            time.sleep(0.005)

    def submit(self, op: Op) -> None:
        self.link.submit(op)

    def take(self) -> tuple[str, bytes] | None:
        self.pump()
        return self.link.take()

    def close(self, unacked: list[str], timeout_s: float = 60) -> Undelivered:
        """Close the node and pump until its Redis thread answered; returns what it left."""
        closed = self.link.close(unacked)
        left: list[Undelivered] = []
        closed.addCallback(left.append)
        self.wait_for(lambda _: bool(left), timeout_s)
        return left[0]
