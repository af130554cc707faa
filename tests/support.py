"""What the tests share: real `scrapy crawl` node processes and what to check about them, a
store that joined a job, a push op, the `clustersync` command run in this process, `wait_until`,
and how many runs the chaos soaks make."""

from __future__ import annotations

import atexit
import os
import random
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, Push, make_client
from testkit.forked import Zygote
from testkit.nodes import NodeProcess
from testkit.proxy import TcpProxy
from testkit.redis_server import LOCALHOST, RedisServer
from testkit.site import TestSite

from cli_runner import CliRun, run_cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PROJECT = ROOT / "example_project"

#: Settings that make small test crawls finish fast; a test may override any of them.
FAST_SETTINGS = {
    "CLUSTERSYNC_IDLE_CLOSE_AFTER": "1",
    "CLUSTERSYNC_HEARTBEAT_INTERVAL": "0.3",
    "CLUSTERSYNC_LEASE_TIMEOUT": "3",
    # as long as the lease: a node stalled by a busy test machine is not declared dead sooner
    "CLUSTERSYNC_NODE_DEAD_AFTER": "3",
    "LOG_LEVEL": "INFO",
}


@dataclass
class Node:
    name: str
    process: NodeProcess
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """kill -9: no cleanup, no close, no release of leases."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def closed_at(self) -> datetime:
        """When Scrapy logged "Spider closed"."""
        for line in self.log().splitlines():
            if "Spider closed" in line:
                return datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
        raise AssertionError(f"{self.name} never closed:\n{self.log()[-2000:]}")

    def finish_reason(self) -> str | None:
        for line in self.log().splitlines():
            if "'finish_reason':" in line:
                return line.split("'finish_reason':")[1].strip(" ,'}")
        return None


def start_node(
    name: str,
    redis_url: str,
    start_url: str,
    workdir: Path,
    settings: Mapping[str, str | None] | None = None,
    project_dir: Path = EXAMPLE_PROJECT,
    spider: str = "site",
    env: Mapping[str, str] | None = None,
    options: tuple[str, ...] = (),
) -> Node:
    """Start ``scrapy crawl`` as a cluster node; its User-Agent is ``name`` (the site counts it)
    unless ``settings`` say otherwise (a setting given as None is left off the command line);
    ``options``: more of the command line (``-o FILE``)."""
    given = {**FAST_SETTINGS, "USER_AGENT": name,
             "CLUSTERSYNC_SPOOL_DIR": str(workdir / "spool"), **(settings or {})}
    merged = {key: value for key, value in given.items() if value is not None}
    log_path = workdir / f"{name}.log"
    process = ZYGOTE.start_node(
        spider, cwd=project_dir, log_path=log_path, spider_args={"start_url": start_url},
        settings=merged, env={"CLUSTERSYNC_REDIS_URL": redis_url, **(env or {})},
        options=options,
    )
    STARTED.append(process)
    return Node(name, process, log_path)


#: where `start_node` forks its nodes from (testkit/forked.py): one per test process
ZYGOTE = Zygote()
atexit.register(ZYGOTE.stop)

#: every node process started, so that a test that fails half way leaves none running
STARTED: list[NodeProcess] = []


def kill_leftover_nodes() -> None:
    """SIGKILL every node process a test started that is still running."""
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(10)


def start_nodes(count: int, redis_url: str, start_url: str, workdir: Path,
                settings: Mapping[str, str] | None = None, **kw: object) -> list[Node]:
    return [start_node(f"node{i + 1}", redis_url, start_url, workdir, settings, **kw)  # type: ignore[arg-type]
            for i in range(count)]


def wait_all(nodes: list[Node], timeout_s: float = 120) -> None:
    """Wait for every node to exit; fail with the logs' tails if one hangs or fails."""
    deadline = time.monotonic() + timeout_s
    for node in nodes:
        try:
            node.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in nodes:
                other.process.kill()
            raise AssertionError(f"{node.name} did not finish in {timeout_s}s:\n"
                                 f"{node.log()[-3000:]}") from None


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` once ``timeout_s`` has passed.

    The one way the suite waits for something: never a fixed sleep that hopes it happened."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def start_done(server: RedisServer, job: str) -> bool:
    """Redis holds that ``job``'s start() was exhausted (a node's "S" op reached it)."""
    return bool(server.client().hexists(f"clustersync:{{{job}}}:meta", "start_done"))


def pages_fetched(site: TestSite) -> int:
    return sum(site.hits().values())


def missing_pages(site: TestSite) -> list[str]:
    hits = site.hits()
    return [path for path in site.page_paths() if hits.get(path, 0) == 0]


def pages_fetched_twice(site: TestSite) -> dict[str, int]:
    return {path: count for path, count in site.hits().items() if count > 1}


def replicate(replica: RedisServer, primary: RedisServer, timeout_s: float = 30) -> None:
    """Make ``replica`` a replica of ``primary`` and wait until it holds primary's data."""
    client = replica.client()
    client.replicaof(LOCALHOST, primary.port)
    wait_until(lambda: in_sync(client), timeout_s, f"{replica} to sync from {primary}")


def in_sync(replica: redis.Redis) -> bool:
    """The replica's link to its primary is up and its initial sync is over."""
    info = replica.info("replication")
    return info.get("master_link_status") == "up" and not info.get("master_sync_in_progress")


def fail_over(old: RedisServer, new: RedisServer, proxy: TcpProxy | None = None) -> None:
    """A planned failover from ``old`` to ``new``, its synced replica, losing no write.

    Writes to ``old`` are held (CLIENT PAUSE WRITE) until ``new`` has applied every write
    ``old`` ever acknowledged (replication is asynchronous); then ``new`` is promoted, ``old``
    becomes its replica and ``proxy`` sends new connections to ``new`` (connections already
    open stay with ``old``, as after a DNS or virtual IP move). The held writes are let go
    last, so ``old`` answers them READONLY instead of acknowledging them.
    """
    old_client, new_client = old.client(), new.client()
    old_client.client_pause(30_000, all=False)
    offset = int(old_client.info("replication")["master_repl_offset"])
    wait_until(lambda: int(new_client.info("replication")["slave_repl_offset"]) >= offset,
               10, f"{new} to catch up with {old}")
    new_client.replicaof("NO", "ONE")
    old_client.replicaof(LOCALHOST, new.port)
    if proxy is not None:
        proxy.retarget(LOCALHOST, new.port)
    old_client.client_unpause()


def project_with_spiders(workdir: Path, module: str, source: str) -> Path:
    """A copy of the example project under ``workdir`` with ``source`` (indented Python, as in a
    triple-quoted string) as ``example/spiders/<module>.py``; its spiders may import ``sleep``
    and ``mark`` from ``example.spiders.helpers`` (tests/spider_helpers.py)."""
    root = workdir / "project"
    (root / "example" / "spiders").mkdir(parents=True, exist_ok=True)
    for name in ("scrapy.cfg", "example/__init__.py", "example/settings.py",
                 "example/spiders/__init__.py", "example/spiders/site.py"):
        (root / name).write_text((EXAMPLE_PROJECT / name).read_text())
    (root / "example/spiders/helpers.py").write_text(
        (Path(__file__).parent / "spider_helpers.py").read_text())
    (root / f"example/spiders/{module}.py").write_text(textwrap.dedent(source))
    (workdir / "marks").mkdir(exist_ok=True)
    return root


def open_barrier(workdir: Path, name: str) -> None:
    """Let the spiders of ``project_with_spiders`` that ``wait_for(name)`` go on."""
    (workdir / "marks" / name).touch()


def marks(workdir: Path, name: str) -> list[str]:
    """The lines the spiders of ``project_with_spiders`` marked in ``name``."""
    path = workdir / "marks" / name
    return path.read_text().splitlines() if path.exists() else []


def node_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The environment the spiders of ``project_with_spiders`` need (where marks go)."""
    return {"MARKS_DIR": str(workdir / "marks"), **extra}


# ---- the job's store, its ops, the CLI ---------------------------------------------------------

CODEC = RequestCodec(None, max_bytes=1 << 20)
FINGERPRINTER = RequestFingerprinter()


def push_op(url: str, priority: int = 0, dont_filter: bool = False) -> Push:
    """A push of ``Request(url)`` as the scheduler builds it (Scrapy's fingerprint, encoded)."""
    request = Request(url, priority=priority, dont_filter=dont_filter)
    fingerprint = b"" if dont_filter else FINGERPRINTER.fingerprint(request)
    return Push(fingerprint, priority, CODEC.encode(request), dont_filter)


def joined(server: RedisServer | str, node: str = "n1", job: str = "job",
           dedup: DedupSettings | None = None, ttl_ms: int = 10_000) -> tuple[JobStore, str]:
    """A `JobStore` of node ``node`` that joined ``job`` on ``server`` (a server or its URL),
    creating the job with ``dedup`` (the store's default when None); and the job's epoch."""
    url = server if isinstance(server, str) else server.url
    store = (JobStore(make_client(url), job, node) if dedup is None
             else JobStore(make_client(url), job, node, dedup))
    epoch, _ = store.join(ttl_ms=ttl_ms)
    return store, epoch


def clustersync(url: str, *args: str, stdin: str | None = None) -> CliRun:
    """Run ``clustersync --redis-url URL ARGS...`` in this process (cli_runner.run_cli: no
    interpreter to start; the entry point itself is tested as a process in tests/test_cli.py)."""
    return run_cli(url, *args, input=stdin)


# ---- chaos soaks ------------------------------------------------------------------------------

def chaos_runs() -> int:
    """How many runs each chaos soak makes: ``CLUSTERSYNC_CHAOS_RUNS``, 1 by default (`make
    test`); `make chaos` runs the soaks alone with their full count."""
    return int(os.environ.get("CLUSTERSYNC_CHAOS_RUNS", "1"))


def chaos_seed() -> int:
    """The seed of one chaos run's schedule: ``CLUSTERSYNC_CHAOS_SEED`` (to replay a run whose
    printed seed failed), else a fresh one."""
    given = os.environ.get("CLUSTERSYNC_CHAOS_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


def chaos_soak() -> bool:
    """Whether the chaos tests run as soaks (`make chaos` sets ``CLUSTERSYNC_CHAOS_RUNS``) with
    their full sizes, or as the quick runs of `make test`: smaller, each still injecting its
    faults mid-crawl."""
    return "CLUSTERSYNC_CHAOS_RUNS" in os.environ
