"""A password given in the Redis URL's query (``?password=``, the usual form for ``unix://``
sockets) never shows in a node's log or in what the `clustersync` command prints, on the paths
that work and on those that fail (a wrong password, Redis unreachable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.redis_server import LOCALHOST, RedisServer, free_port
from testkit.site import TestSite

from conftest import RedisFactory, SiteFactory
from support import clustersync, start_node, wait_all

SECRET = "Zq7-very-secret-9f"
WRONG = "Wx3-wrong-secret-2k"


def query_url(port: int, password: str, scheme: str = "redis") -> str:
    return f"{scheme}://{LOCALHOST}:{port}/0?password={password}"


def every_command(job: str) -> list[tuple[str, ...]]:
    """One run of each command `clustersync --help` lists (the mutating ones last)."""
    return [
        ("jobs",), ("jobs", "--json"), ("status", job), ("status", job, "--json"),
        ("status", job, "--check"), ("nodes", job), ("top", job, "-n", "1"),
        ("check", job), ("dead", job), ("failed", job), ("task", job, "T"), ("tasks", job),
        ("seed", job, "http://127.0.0.1:9/extra"), ("pause", job), ("resume", job),
        ("stop", job), ("resume", job), ("restart", job, "--force"), ("purge", job, "--yes"),
    ]


@pytest.fixture
def guarded_redis(redis_factory: RedisFactory) -> RedisServer:
    return redis_factory(password=SECRET)


@pytest.mark.parametrize("scheme", ["redis", "unix"])
def test_a_crawl_with_the_password_in_the_query_never_logs_it(
    redis_factory: RedisFactory, site: SiteFactory, tmp_path: Path, scheme: str
) -> None:
    # given a Redis that requires a password, given to the node as ?password= (over TCP, or
    # over its unix socket)
    socket = tmp_path / "redis.sock"
    server = redis_factory(password=SECRET, extra_args=["--unixsocket", str(socket)])
    url = (f"unix://{socket}?db=0&password={SECRET}" if scheme == "unix"
           else query_url(server.port, SECRET))
    pages: TestSite = site(5)
    # when a node crawls the site
    node = start_node("node1", url, pages.start_url, tmp_path, settings={"LOG_LEVEL": "DEBUG"})
    wait_all([node], timeout_s=90)
    # then it crawled and logged where it joined, never the password
    log = node.log()
    assert "joined job" in log and "password=***" in log, log[-3000:]
    assert SECRET not in log
    assert all(pages.hits().get(path) == 1 for path in pages.page_paths())


def test_every_command_keeps_the_password_in_the_query_out_of_its_output(
    guarded_redis: RedisServer,
) -> None:
    # given a job on a Redis that requires a password, given as ?password=
    url = query_url(guarded_redis.port, SECRET)
    assert clustersync(url, "seed", "shop", "--create", "http://127.0.0.1:9/").returncode == 0
    # when every command runs against it
    runs = {args: clustersync(url, *args) for args in every_command("shop")}
    # then each printed what it did and none printed the password
    for args, run in runs.items():
        assert SECRET not in run.output, (args, run.output)
        assert "Traceback" not in run.output, (args, run.output)
    assert runs[("jobs",)].returncode == 0 and "shop" in runs[("jobs",)].stdout


@pytest.mark.parametrize("scheme", ["redis", "rediss", "unix"])
def test_an_unreachable_redis_never_prints_the_password(scheme: str, tmp_path: Path) -> None:
    # given a URL whose Redis is not there (or refuses), with the password in the query
    url = (f"unix:///nonexistent/redis.sock?db=0&password={SECRET}" if scheme == "unix"
           else query_url(free_port(), SECRET, scheme))
    # when every command runs against it
    for args in every_command("shop"):
        run = clustersync(url, *args)
        # then it fails with a message naming the Redis, never its password
        assert run.returncode != 0, (args, run.output)
        assert SECRET not in run.output, (args, run.output)
        assert "password=***" in run.output or "(from --redis-url)" in run.output, run.output
    # and a node started with it stops with one error naming the Redis, not its password
    if scheme == "unix":
        node = start_node("node1", url, "http://127.0.0.1:9/", tmp_path)
        node.wait(60)
        assert "password=***" in node.log() and SECRET not in node.log(), node.log()[-3000:]


def test_a_wrong_password_in_the_query_is_refused_without_being_printed(
    guarded_redis: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a Redis that requires a password and a URL with another one in its query
    url = query_url(guarded_redis.port, WRONG)
    # when the commands and a node use it
    runs = [clustersync(url, *args) for args in every_command("shop")]
    node = start_node("node1", url, site(2).start_url, tmp_path, settings={"LOG_LEVEL": "DEBUG"})
    node.wait(60)
    # then each is refused (exit code 4, reason clustersync_redis_auth) and neither password
    # appears anywhere
    for run in runs:
        assert run.returncode == 4, run.output
        assert WRONG not in run.output and SECRET not in run.output, run.output
    log = node.log()
    assert "refused this node" in log, log[-3000:]
    assert WRONG not in log and SECRET not in log
