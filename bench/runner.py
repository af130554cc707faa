"""One benchmark run: one variant's nodes crawling the whole site, measured from the outside."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
from redis_commands import CommandCounter, commandstats, commandstats_delta, slowest_call

from testkit.nodes import start_node
from testkit.proxy import TcpProxy
from testkit.redis_server import RedisServer
from testkit.site_process import SiteProcess

EXAMPLE_PROJECT = Path(__file__).resolve().parents[1] / "example_project"
BENCH_DIR = Path(__file__).resolve().parent
STOP_GRACE_S = 20.0
ENGINES = {
    # engine name -> (settings module, setting that takes the Redis URL)
    "vanilla": ("benchproj.settings_vanilla", ""),
    "scrapy-redis": ("benchproj.settings_scrapy_redis", "REDIS_URL"),
    "clustersync": ("benchproj.settings_clustersync", "CLUSTERSYNC_REDIS_URL"),
}


@dataclass(frozen=True)
class Variant:
    """What runs: an engine, how many nodes, the one-way delay between nodes and Redis, and
    whether each node also writes its items to a JSON lines feed (``-o items.jsonl``)."""

    engine: str
    nodes: int
    delay_s: float = 0.0
    feed: bool = False
    #: for an A/B run: the commit of an older version of the package, and the python of the
    #: virtualenv it is installed in (bench/baseline.py); "" for the code of this checkout
    baseline: str = ""
    python: str = ""
    #: the nodes' CLUSTERSYNC_REGION, the site pinned to it before they start ("" for none)
    region: str = ""

    @property
    def key(self) -> str:
        """E.g. ``clustersync x2 +2.5ms``, ``vanilla x1 +feed`` or ``clustersync@40fc015 x1``:
        unique, and what the table shows."""
        delay = f" +{self.delay_s * 1000:g}ms" if self.delay_s else ""
        at = f"@{self.baseline}" if self.baseline else ""
        region = f" region {self.region}" if self.region else ""
        feed = " +feed" if self.feed else ""
        return f"{self.engine}{at} x{self.nodes}{delay}{region}{feed}"

    @property
    def uses_redis(self) -> bool:
        return bool(ENGINES[self.engine][1])


@dataclass
class RunResult:
    """What one run measured. Times are seconds; rates are pages per second."""

    variant: str
    repeat: int
    pages: int
    fetched: int  # distinct pages fetched
    fetches: int  # page GETs, duplicates included
    fetched_twice: int  # distinct pages fetched more than once
    missing: int
    span_s: float  # first page fetched -> last page fetched (site clock)
    to_last_page_s: float  # nodes started -> last page fetched
    wall_s: float  # nodes started -> every node exited (includes the idle-close wait)
    longest_pause_s: float  # longest time without a page fetched, between first and last
    to_first_page_s: float  # nodes started -> first page fetched
    steady_pages_per_s: float  # the pages from the 10th to the 90th percentile / their span
    node_cpu_s: float  # CPU of the node processes (user + system), whole run
    redis_cpu_s: float | None  # CPU of the run's redis-server, whole run
    capped: bool
    counted: bool = False  # a counting run: MONITOR attached, times not comparable
    redis_commands: int | None = None  # sent by the nodes, a script call counts once (counted)
    redis_commands_with_scripts: int | None = None  # INFO commandstats: scripts' commands too
    commands_by_name: dict[str, int] = field(default_factory=dict)
    slowest_redis_call_ms: float | None = None  # longest single command (SLOWLOG, >= 10 ms)
    slowest_redis_call: str = ""
    finish_reasons: list[str] = field(default_factory=list)
    errors_logged: int = 0
    node_elapsed_s: list[float] = field(default_factory=list)
    node_responses: list[int] = field(default_factory=list)  # shows that every node crawled

    @property
    def pages_per_s(self) -> float:
        return self.fetched / self.span_s if self.span_s > 0 else 0.0

    @property
    def node_cpu_ms_per_page(self) -> float:
        return 1000 * self.node_cpu_s / self.fetched if self.fetched else 0.0

    @property
    def redis_cpu_ms_per_page(self) -> float | None:
        if self.redis_cpu_s is None or not self.fetched:
            return None
        return 1000 * self.redis_cpu_s / self.fetched

    @property
    def commands_per_page(self) -> float | None:
        """Commands the nodes sent per page fetched (counting runs only)."""
        return _per_page(self.redis_commands, self.fetched)

    @property
    def commands_per_page_with_scripts(self) -> float | None:
        """Commands Redis ran per page fetched, those run by scripts included."""
        return _per_page(self.redis_commands_with_scripts, self.fetched)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "pages_per_s": self.pages_per_s, "commands_per_page": self.commands_per_page,
            "commands_per_page_with_scripts": self.commands_per_page_with_scripts,
            "node_cpu_ms_per_page": self.node_cpu_ms_per_page,
            "redis_cpu_ms_per_page": self.redis_cpu_ms_per_page,
        }


def steady_rate(times: list[float]) -> float:
    """Pages per second between the 10th and the 90th percentile of the page hits (sorted
    times): the crawl's rate without its start-up and its tail."""
    if len(times) < 10:
        return 0.0
    first, last = len(times) // 10, len(times) * 9 // 10
    span_s = times[last] - times[first]
    return (last - first) / span_s if span_s > 0 else 0.0


def _per_page(commands: int | None, pages: int) -> float | None:
    return commands / pages if commands is not None and pages else None


@dataclass
class _Redis:
    """The run's own redis-server, the URL the nodes use and what is counted on it."""

    server: RedisServer
    url: str
    stats_before: dict[str, int]
    counter: CommandCounter | None
    stats_after: dict[str, int] = field(default_factory=dict)
    slowest: tuple[float, str] | None = None

    def finish(self) -> None:
        if self.counter is not None:
            self.counter.stop()
        client = self.server.client()
        self.stats_after = commandstats(client)
        self.slowest = slowest_call(client)


@dataclass(frozen=True)
class Crawl:
    """How the nodes' part of a run went, timed and costed by the bench process."""

    started: float  # time.monotonic() just before the first node was spawned
    wall_s: float
    capped: bool
    node_cpu_s: float  # user + system CPU of every node process
    #: (time.monotonic(), user + system CPU seconds of every node so far), in time order:
    #: taken while the nodes ran, when asked (see `crawl`); read with
    #: `testkit.rates.growth_between`
    cpu_samples: tuple[tuple[float, float], ...] = ()


class NodeCpuSampler:
    """Samples the CPU the node processes have used so far, every ``every_s``, from a thread.

    A node that has exited keeps its last reading; one that exited before its first reading
    counts as nothing (the whole-run figure, from ``getrusage``, has it).
    """

    def __init__(self, pids: list[int], every_s: float) -> None:
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []
        self._processes = {pid: psutil.Process(pid) for pid in pids}
        self._last = dict.fromkeys(pids, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-cpu", daemon=True)

    def start(self) -> NodeCpuSampler:
        self._thread.start()
        return self

    def stop(self) -> tuple[tuple[float, float], ...]:
        """Stop sampling (one last sample first) and return the samples, in time order."""
        self._stop.set()
        self._thread.join()
        return tuple(self.samples)

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.every_s):
                self._sample()
                return

    def _sample(self) -> None:
        for pid, process in self._processes.items():
            try:
                times = process.cpu_times()
            except psutil.Error:  # exited: its last reading stands
                continue
            self._last[pid] = times.user + times.system
        self.samples.append((time.monotonic(), sum(self._last.values())))


def run_variant(
    variant: Variant, repeat: int, site: SiteProcess, workdir: Path, cap_s: float,
    count_commands: bool = False,
) -> RunResult:
    """Crawl the whole site with ``variant`` (stopped after ``cap_s``) and measure it.

    ``count_commands`` attaches a MONITOR to count the commands the nodes send. MONITOR makes
    Redis format every argument it receives, which slows big calls down (a script that writes
    megabytes takes most of a second longer), so a counting run's times are not comparable.
    """
    label = f"{variant.key.replace(' ', '_')}-{'count' if count_commands else f'r{repeat}'}"
    run_dir = workdir / label
    agent = f"bench/{label}"
    cpu_before = _children_cpu_s()
    with _redis_for(variant, run_dir, count_commands) as redis:
        crawl = _crawl(variant, site.start_url, agent, run_dir, redis, cap_s)
        if redis is not None:
            redis.finish()
    # redis-server is a child of this process too, reaped when the block above stopped it
    redis_cpu_s = _children_cpu_s() - cpu_before - crawl.node_cpu_s
    hits = site.agent_hits(agent)
    result = RunResult(
        variant=variant.key, repeat=repeat, pages=site.pages, fetched=len(hits.hits),
        fetches=sum(hits.hits.values()),
        fetched_twice=sum(1 for n in hits.hits.values() if n > 1),
        missing=site.pages - len(hits.hits), span_s=hits.span_s,
        to_last_page_s=(hits.last - crawl.started) if hits.last is not None else 0.0,
        wall_s=crawl.wall_s, longest_pause_s=hits.longest_pause_s, capped=crawl.capped,
        to_first_page_s=(hits.first - crawl.started) if hits.first is not None else 0.0,
        steady_pages_per_s=steady_rate(hits.times),
        counted=count_commands, node_cpu_s=crawl.node_cpu_s,
        redis_cpu_s=redis_cpu_s if redis is not None else None,
    )
    if redis is not None:
        _add_redis_stats(result, redis)
    _add_node_stats(result, run_dir, variant.nodes)
    return result


def crawl(
    variant: Variant, start_url: str, agent: str, run_dir: Path, cap_s: float,
    settings: Mapping[str, str], stop_grace_s: float = STOP_GRACE_S,
    cpu_sample_s: float | None = None,
) -> Crawl:
    """Crawl from ``start_url`` with ``variant``'s nodes on a redis-server of the run's own,
    ``settings`` given to every node with ``-s``; past ``cap_s`` the nodes are stopped as
    Ctrl-C does, and killed if still running ``stop_grace_s`` later. With ``cpu_sample_s``,
    the nodes' CPU is sampled that often (``Crawl.cpu_samples``). What the sites saw is
    the caller's to read (each node's User-Agent is ``agent``)."""
    with _redis_for(variant, run_dir, count_commands=False) as redis:
        return _crawl(variant, start_url, agent, run_dir, redis, cap_s, settings, stop_grace_s,
                      cpu_sample_s)


def _crawl(
    variant: Variant, start_url: str, agent: str, run_dir: Path, redis: _Redis | None,
    cap_s: float, settings: Mapping[str, str] | None = None,
    stop_grace_s: float = STOP_GRACE_S, cpu_sample_s: float | None = None,
) -> Crawl:
    settings = dict(settings or {})
    if variant.region and redis is not None:
        _pin_site(variant, start_url, redis, run_dir)
        settings["CLUSTERSYNC_REGION"] = variant.region
    cpu_before = _children_cpu_s()
    started = time.monotonic()
    processes = [
        _spawn_node(variant, start_url, agent, run_dir / f"node{i}", redis, settings)
        for i in range(variant.nodes)
    ]
    sampler = None if cpu_sample_s is None else NodeCpuSampler(
        [process.pid for process in processes], cpu_sample_s).start()
    try:
        capped = _wait_all(processes, started + cap_s, stop_grace_s)
    finally:
        samples = () if sampler is None else sampler.stop()
    wall_s = time.monotonic() - started
    return Crawl(started, wall_s, capped, _children_cpu_s() - cpu_before, samples)


def _children_cpu_s() -> float:
    """User + system CPU seconds of every child process this process has reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _add_redis_stats(result: RunResult, redis: _Redis) -> None:
    if redis.counter is not None:
        result.redis_commands = redis.counter.client_commands
    result.commands_by_name = commandstats_delta(redis.stats_before, redis.stats_after)
    result.redis_commands_with_scripts = sum(result.commands_by_name.values())
    if redis.slowest is not None:
        result.slowest_redis_call_ms, result.slowest_redis_call = redis.slowest


@contextmanager
def _redis_for(variant: Variant, run_dir: Path, count_commands: bool) -> Iterator[_Redis | None]:
    """A fresh redis-server for the run (never 6379), behind a delaying proxy if asked."""
    if not variant.uses_redis:
        yield None
        return
    server = RedisServer(run_dir / "redis").start()
    proxy = TcpProxy("127.0.0.1", server.port, variant.delay_s).start() if variant.delay_s else None
    try:
        url = proxy.url() if proxy is not None else server.url
        before = commandstats(server.client())
        counter = CommandCounter(server.port).start() if count_commands else None
        yield _Redis(server, url, before, counter)
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()


def _pin_site(variant: Variant, start_url: str, redis: _Redis, run_dir: Path) -> None:
    """Create the job with its start URL and pin the site to the variant's region, as an
    operator does before the nodes of a region start (straight to Redis, not through the
    variant's delay: the operator is not the one far away)."""
    site = urlsplit(start_url).hostname or ""
    cli = [sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url", redis.server.url]
    run_dir.mkdir(parents=True, exist_ok=True)
    for args in (["seed", "site", "--create", start_url],
                 ["regions", "site", "--pin", f"{site}={variant.region}"]):
        subprocess.run([*cli, *args], check=True, cwd=run_dir, stdout=subprocess.DEVNULL)


def _spawn_node(
    variant: Variant, start_url: str, agent: str, node_dir: Path, redis: _Redis | None,
    extra_settings: Mapping[str, str],
) -> subprocess.Popen[bytes]:
    """One node of ``variant`` in ``node_dir``: the example project's spider, the variant's
    settings module (from the bench's project) and ``extra_settings``, its own relative
    paths; with a feed, its items go to ``node_dir/items.jsonl``."""
    settings_module, url_setting = ENGINES[variant.engine]
    node_dir.mkdir(parents=True)
    settings = {**extra_settings, "USER_AGENT": agent,
                "BENCH_STATS_PATH": str(node_dir / "stats.json")}
    if redis is not None:
        settings[url_setting] = redis.url
    return start_node(
        "site", cwd=node_dir, log_path=node_dir / "scrapy.log",
        spider_args={"start_url": start_url}, settings=settings,
        options=["-o", str(node_dir / "items.jsonl")] if variant.feed else [],
        env={"SCRAPY_SETTINGS_MODULE": settings_module}, pythonpath=[BENCH_DIR, EXAMPLE_PROJECT],
        python=Path(variant.python) if variant.python else None,
    )


def _wait_all(processes: list[subprocess.Popen[bytes]], deadline: float,
              stop_grace_s: float) -> bool:
    """Wait for every node; past ``deadline`` stop them as Ctrl-C does (and kill those still
    running ``stop_grace_s`` later). True if it had to."""
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    else:
        return False
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=stop_grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return True


def node_stats(run_dir: Path, nodes: int) -> list[dict[str, Any] | None]:
    """Each node's final Scrapy stats, None for a node that wrote none (it was killed, or
    failed: see its scrapy.log)."""
    found: list[dict[str, Any] | None] = []
    for i in range(nodes):
        try:
            found.append(json.loads((run_dir / f"node{i}" / "stats.json").read_text()))
        except (OSError, ValueError):
            found.append(None)
    return found


def _add_node_stats(result: RunResult, run_dir: Path, nodes: int) -> None:
    for stats in node_stats(run_dir, nodes):
        if stats is None:
            result.finish_reasons.append("no stats (see scrapy.log)")
            continue
        result.finish_reasons.append(str(stats.get("finish_reason", "?")))
        result.errors_logged += int(stats.get("log_count/ERROR", 0))
        result.node_elapsed_s.append(float(stats.get("elapsed_time_seconds", 0.0)))
        result.node_responses.append(int(stats.get("response_received_count", 0)))
