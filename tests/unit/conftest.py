"""What keeps the unit tier fast: no test here starts a process or opens a network connection.

A test that needs either belongs in tests/, next to the redis-server fixtures. fakeredis works
here: it talks to no socket.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import NoReturn

import fakeredis
import pytest

from scrapy_clustersync.store import JobStore, Push
from scrapy_clustersync.store.job_store import new_call_id

UNIT_TESTS = Path(__file__).parent
#: a unit test that takes longer than this is stuck, or is not a unit test
UNIT_TIMEOUT_S = 10


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every unit test the short timeout (the hook sees the items of both tiers)."""
    for item in items:
        if item.path.is_relative_to(UNIT_TESTS) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


@pytest.fixture(autouse=True)
def no_process_and_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a process or connecting a socket fails the test, saying where it belongs."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("a unit test starts no process and opens no connection: "
                             "move it to tests/")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.fixture
def store() -> JobStore:
    """Job "shop" on a fakeredis, with one request queued (the API's and the alerts' tests; a
    module may define a ``store`` of its own)."""
    job = JobStore(fakeredis.FakeRedis(), "shop", node_id="cli", writes_seen=None)
    epoch = job.ensure_job()
    job.flush(epoch, [Push(b"f" * 20, 0, b"request", 0, "example.com")], new_call_id())
    return job
