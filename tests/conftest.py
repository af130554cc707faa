"""Fixtures shared by the whole suite: real Redis servers, the test website, the TCP proxy.

Every Redis here is a `redis-server` child process started by the test on a free port of
127.0.0.1 (never 6379, never a Redis the test did not start). Without a `redis-server` binary
the tests that need one are skipped with an install hint, except under ``CI=true`` where that
is a failure: CI must run them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fault_spiders import FAULT_SPIDERS

from testkit.proxy import TcpProxy
from testkit.redis_server import RedisServer, redis_server_binary
from testkit.site import TestSite

from support import ZYGOTE, kill_leftover_nodes, project_with_spiders

NO_REDIS_MESSAGE = (
    "redis-server not found: install it with `apt-get install redis-server` "
    "(macOS: `brew install redis`) or set REDIS_SERVER_BIN to its path"
)

_S = TypeVar("_S", RedisServer, TestSite, TcpProxy)
RedisFactory = Callable[..., RedisServer]
SiteFactory = Callable[..., TestSite]
ProxyFactory = Callable[..., TcpProxy]


def running_in_ci() -> bool:
    """True under CI (``CI=true``), where a missing redis-server must fail, not skip."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_redis_server() -> None:
    """Skip the calling test (fail it under CI) when no redis-server binary is available."""
    if redis_server_binary() is not None:
        return
    if running_in_ci():
        pytest.fail(f"{NO_REDIS_MESSAGE} (CI=true: tests that need Redis must run)")
    pytest.skip(NO_REDIS_MESSAGE)


def started_until_teardown(build: Callable[..., _S]) -> Iterator[Callable[..., _S]]:
    """Yield ``make(*args, **kw)``: ``build`` a service and start it; stop them all afterwards."""
    services: list[_S] = []

    def make(*args: Any, **kw: Any) -> _S:
        service = build(*args, **kw)
        services.append(service)
        return service.start()

    yield make
    for service in services:
        service.stop()


#: the xdist groups the timing tests are dealt to, in turn: at most this many of them run
#: beside each other (one group alone would make the suite as long as all of them end to end)
TIMING_GROUPS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that assert a wall-clock window run one after another on ``TIMING_GROUPS`` xdist
    workers (``--dist loadgroup``): never more of them beside each other, whose subprocesses
    would compete for the same two cores in the very second being measured."""
    timed = [item for item in items if item.get_closest_marker("timing") is not None]
    for index, item in enumerate(timed):
        item.add_marker(pytest.mark.xdist_group(f"timing-{index % TIMING_GROUPS}"))


def pytest_sessionfinish() -> None:
    """The zygote the nodes were forked from ends with the session (each xdist worker has its
    own), after the nodes: waited for, its nodes' CPU time counts as this process's."""
    ZYGOTE.stop()


@pytest.fixture(autouse=True)
def no_leftover_nodes() -> Iterator[None]:
    """Node processes a test started do not outlive it, even when it fails half way."""
    yield
    kill_leftover_nodes()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[RedisFactory]:
    """``make(**options) -> RedisServer``: start another redis-server, stopped at teardown.

    Options go to `RedisServer` (``port``, ``persistence``, ``password``, ``extra_args``);
    ``directory`` defaults to a fresh ``tmp_path/redis-N``.
    """
    require_redis_server()
    count = iter(range(10**6))

    def build(**options: Any) -> RedisServer:
        options.setdefault("directory", tmp_path / f"redis-{next(count)}")
        return RedisServer(**options)

    yield from started_until_teardown(build)


@pytest.fixture
def redis_server(redis_factory: RedisFactory) -> RedisServer:
    """A started redis-server without persistence, in its own tmp directory."""
    return redis_factory()


@pytest.fixture
def make_site() -> Iterator[SiteFactory]:
    """``make_site(pages, **kw) -> TestSite``, started; every site is stopped at teardown.

    ``kw`` goes to `TestSite` (``links_per_page``, ``seed``, ``port``, ``delay_s``).
    """
    yield from started_until_teardown(TestSite)


@pytest.fixture
def site(make_site: SiteFactory) -> SiteFactory:
    """The same factory as `make_site`, under the shorter name: ``site(pages, **kw)``."""
    return make_site


@pytest.fixture
def proxy_factory() -> Iterator[ProxyFactory]:
    """``make(target, delay_s=0.0, **kw) -> TcpProxy``, started; all stopped at teardown.

    ``target`` is anything with a ``port`` (a `RedisServer`, a `TestSite`) or a port number;
    the target host is 127.0.0.1 unless ``target_host=`` is given.
    """

    def build(target: Any, delay_s: float = 0.0, **kw: Any) -> TcpProxy:
        port = target if isinstance(target, int) else int(target.port)
        host = kw.pop("target_host", "127.0.0.1")
        return TcpProxy(host, port, delay_s=delay_s, **kw)

    yield from started_until_teardown(build)


@pytest.fixture
def filter_from_first_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """New Bloom jobs skip their exact set: the filter takes fingerprints from the first URL, for
    tests of the filter's layers (small jobs, with their set, are tests/test_small_jobs.py)."""
    import scrapy_clustersync.store.bloom_layout
    import scrapy_clustersync.store.dedup_upkeep

    for module in (scrapy_clustersync.store.bloom_layout, scrapy_clustersync.store.dedup_upkeep):
        monkeypatch.setattr(module, "set_limit", lambda params: 0)


@pytest.fixture
def fault_project(tmp_path: Path) -> Path:
    """A copy of the example project with the spiders of tests/fault_spiders.py as
    ``example.spiders.faults``; their marks go to ``tmp_path/marks`` (support.marks)."""
    return project_with_spiders(tmp_path, "faults", FAULT_SPIDERS)
