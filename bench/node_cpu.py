"""Benchmark: the CPU one node spends per page, thread by thread, vanilla Scrapy beside it.

    python bench/node_cpu.py [--pages 3000] [--repeat 3] [--cap 60]

Serves a generated site from its own process and crawls all of it with one vanilla Scrapy node
and one scrapy-clustersync node (on a redis-server of its own), ``--repeat`` interleaved rounds.
While a node runs, the CPU time of each of its threads is sampled from ``/proc`` (the node names
its threads at the OS level: ``benchproj.extensions.ThreadNames``), and so is the
redis-server's. The CPU is counted over the crawl's span (first page to last page, as timed by
the site), start-up and close left out, and printed per page, with the medians of the rounds:
the reactor's thread (``main``), the node's Redis thread (``clustersync-io``), any other thread,
the redis-server, and pages/s. CPU per page depends far less on what else the machine runs than
pages/s does, so it is the figure to compare two versions of the code by (an A/B run: an older
checkout first on ``PYTHONPATH``, bench/baseline.py).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import BENCH_DIR, ENGINES, EXAMPLE_PROJECT

from testkit.nodes import start_node
from testkit.redis_server import RedisServer, redis_server_binary
from testkit.site_process import SiteProcess

SAMPLE_EVERY_S = 0.05
PROFILE_RATE_HZ = 250
STOP_GRACE_S = 20.0
REDIS_THREAD = "clustersync-io"
#: the columns printed, in order: the threads (by OS name), then the redis-server
THREAD_COLUMNS = ("main", REDIS_THREAD, "other threads")
COLUMNS = (*THREAD_COLUMNS, "redis-server")


@dataclass
class ThreadSampler:
    """Samples the CPU seconds (user + system) of every thread of ``pid`` and of the processes
    in ``others`` (by the name given), every ``SAMPLE_EVERY_S``, from a thread of this
    process; ``names`` ends with each thread's last OS name."""

    pid: int
    others: dict[str, int] = field(default_factory=dict)
    #: thread id, or a name of ``others`` -> (time.monotonic(), CPU s), in time order
    samples: dict[int | str, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list))
    #: thread id -> (time.monotonic(), context switches so far), in time order
    switches: dict[int, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list))
    #: thread id -> (time.monotonic(), system CPU s so far): the kernel's share of ``samples``
    system: dict[int, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list))
    names: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ThreadSampler:
        self._thread = threading.Thread(target=self._run, name="thread-cpu", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        process = psutil.Process(self.pid)
        others = {name: psutil.Process(pid) for name, pid in self.others.items()}
        while not self._stop.wait(SAMPLE_EVERY_S):
            now = time.monotonic()
            try:
                threads = process.threads()
            except psutil.Error:  # exited, or a thread ended while they were read
                if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                    return
                continue
            for thread in threads:
                self.samples[thread.id].append((now, thread.user_time + thread.system_time))
                self.switches[thread.id].append((now, _switches(self.pid, thread.id)))
                self.system[thread.id].append((now, thread.system_time))
                if self.names.get(thread.id) not in COLUMNS:
                    self.names[thread.id] = _thread_name(self.pid, thread.id)
            for name, other in others.items():
                times = other.cpu_times()
                self.samples[name].append((now, times.user + times.system))

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds used from ``start`` to ``end``, by column (``COLUMNS``)."""
        return self._growth(self.samples, start, end)

    def switches_between(self, start: float, end: float) -> dict[str, float]:
        """Context switches (voluntary and not) from ``start`` to ``end``, by thread column."""
        return self._growth(self.switches, start, end)

    def system_between(self, start: float, end: float) -> dict[str, float]:
        """System (kernel) CPU seconds from ``start`` to ``end``, by thread column."""
        return self._growth(self.system, start, end)

    def _growth(self, series: Mapping[int | str, list[tuple[float, float]]] | Mapping[
            int, list[tuple[float, float]]], start: float, end: float) -> dict[str, float]:
        used: dict[str, float] = defaultdict(float)
        for key, samples in series.items():
            if isinstance(key, str):
                column = key
            else:
                name = self.names.get(key, "")
                column = name if name in COLUMNS else "other threads"
            used[column] += _value_at(samples, end) - _value_at(samples, start)
        return used


def _value_at(samples: list[tuple[float, float]], at: float) -> float:
    """A growing counter's value at ``at``: read linearly between the samples around it; its
    first value before them (a thread that started later), its last after (one that ended)."""
    if at <= samples[0][0]:
        return samples[0][1]
    after = bisect_left(samples, at, key=lambda sample: sample[0])
    if after == len(samples):
        return samples[-1][1]
    (t1, v1), (t0, v0) = samples[after], samples[after - 1]
    return v0 + (v1 - v0) * (at - t0) / (t1 - t0)


def _switches(pid: int, tid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    except OSError:
        return 0.0
    # voluntary_ctxt_switches: and nonvoluntary_ctxt_switches:
    return float(sum(int(line.split()[1]) for line in status.splitlines()
                     if line.split(":")[0].endswith("ctxt_switches")))


def _thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Round:
    """One node's crawl: pages, pages/s, and CPU ms and context switches per page by column."""

    engine: str
    pages: int
    pages_per_s: float
    cpu_ms_per_page: dict[str, float]
    switches_per_page: dict[str, float]
    #: under callgrind: instructions of the whole run, by thread ("main", "others")
    instructions: dict[str, int] = field(default_factory=dict)


def crawl_once(engine: str, site: SiteProcess, workdir: Path, label: str, cap_s: float,
               profile_dir: Path | None = None, callgrind: bool = False) -> Round:
    """One node of ``engine`` crawls the whole site; its CPU per page over the crawl's span.
    ``clustersync@DIR`` is clustersync with the package found in DIR first (an older
    checkout). With ``profile_dir``, py-spy records the node there (``LABEL.txt``, collapsed
    stacks). With ``callgrind``, the node runs under valgrind's callgrind (one output per
    thread, in the node's directory: ``instructions``)."""
    engine_name, _, baseline = engine.partition("@")
    settings_module, url_setting = ENGINES[engine_name]
    agent = f"bench/node_cpu/{label.replace('/', '_')}"
    node_dir = workdir / label
    node_dir.mkdir(parents=True)
    settings = {"USER_AGENT": agent, "BENCH_THREAD_NAMES": "1",
                "BENCH_STATS_PATH": str(node_dir / "stats.json")}
    redis = RedisServer(node_dir / "redis").start() if url_setting else None
    try:
        if redis is not None:
            settings[url_setting] = redis.url
        node = start_node(
            "site", cwd=node_dir, log_path=node_dir / "scrapy.log",
            spider_args={"start_url": site.start_url}, settings=settings,
            env={"SCRAPY_SETTINGS_MODULE": settings_module},
            pythonpath=[*([Path(baseline)] if baseline else []), BENCH_DIR, EXAMPLE_PROJECT],
            python=_callgrind_python(node_dir) if callgrind else None)
        others = {"redis-server": redis.pid} if redis is not None and redis.pid else {}
        sampler = ThreadSampler(node.pid, others).start()
        spy = None if profile_dir is None else subprocess.Popen(
            [_py_spy(), "record", "--pid", str(node.pid), "--threads", "--rate",
             str(PROFILE_RATE_HZ), "--format", "raw", "--output",
             str(profile_dir / f"{label}.txt")], stdout=subprocess.DEVNULL)
        try:
            node.wait(timeout=cap_s)
            if spy is not None:
                spy.wait(timeout=STOP_GRACE_S)
        finally:
            if node.poll() is None:
                node.kill()
                node.wait()
            sampler.stop()
    finally:
        if redis is not None:
            redis.stop()
    hits = site.agent_hits(agent)
    if hits.first is None or hits.last is None or hits.span_s <= 0:
        raise RuntimeError(f"{label}: no pages fetched (see {node_dir / 'scrapy.log'})")
    pages = len(hits.hits)
    used = sampler.cpu_between(hits.first, hits.last)
    per_page = {name: used[name] * 1000 / pages for name in COLUMNS if name in used}
    system = sampler.system_between(hits.first, hits.last)
    per_page.update({f"{name} (system)": cpu_s * 1000 / pages for name, cpu_s in system.items()})
    switched = sampler.switches_between(hits.first, hits.last)
    switches = {name: n / pages for name, n in switched.items()}
    counted = instructions(node_dir) if callgrind else {}
    return Round(engine, pages, (pages - 1) / hits.span_s, per_page, switches, counted)


def _callgrind_python(node_dir: Path) -> Path:
    """A python that runs under callgrind, one output file per thread in ``node_dir``."""
    wrapper = node_dir / "python-under-callgrind"
    wrapper.write_text(
        "#!/bin/sh\nexec valgrind --tool=callgrind --separate-threads=yes "
        f"--callgrind-out-file={node_dir}/callgrind.out.%p {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def instructions(node_dir: Path) -> dict[str, int]:
    """Instructions a node ran under callgrind, by thread: "main" (its first), and "others"."""
    counts: dict[str, int] = defaultdict(int)
    for out in sorted(node_dir.glob("callgrind.out.*")):
        thread = out.name.rsplit("-", 1)[-1] if "-" in out.name else "01"
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                counts["main" if thread == "01" else "others"] += int(line.split()[1])
                break
    return counts


def _py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def print_table(rounds: list[Round]) -> None:
    by_engine: dict[str, list[Round]] = defaultdict(list)
    for r in rounds:  # an A/B run's baseline is shown as clustersync@baseline
        by_engine[r.engine.split("@")[0] + ("@baseline" if "@" in r.engine else "")].append(r)
    print("| node | runs | pages/s | " + " | ".join(f"{c} CPU ms/page" for c in COLUMNS)
          + " | node CPU ms/page |")
    print("| --- " * (len(COLUMNS) + 4) + "|")
    medians: dict[str, dict[str, float]] = {}
    for engine, runs in by_engine.items():
        row = {name: statistics.median(r.cpu_ms_per_page.get(name, 0.0) for r in runs)
               for name in COLUMNS}
        row["node"] = statistics.median(
            sum(r.cpu_ms_per_page.get(name, 0.0) for name in THREAD_COLUMNS) for r in runs)
        row["pages/s"] = statistics.median(r.pages_per_s for r in runs)
        medians[engine] = row
        cells = [f"{row['pages/s']:.0f}", *(f"{row[c]:.3f}" for c in COLUMNS),
                 f"{row['node']:.3f}"]
        print(f"| {engine} x1 | {len(runs)} | " + " | ".join(cells) + " |")
    for engine in medians:
        if engine == "clustersync@baseline" and "clustersync" in medians:
            ours, base = medians["clustersync"], medians[engine]
            print(f"clustersync / {engine}: node CPU per page {ours['node'] / base['node']:.3f}, "
                  f"main thread {ours['main'] / base['main']:.3f}, Redis thread "
                  f"{ours[REDIS_THREAD] / max(base[REDIS_THREAD], 1e-9):.3f}; "
                  f"pages/s {ours['pages/s'] / base['pages/s']:.3f}")
    if {"vanilla", "clustersync"} <= medians.keys():
        ours, theirs = medians["clustersync"], medians["vanilla"]
        print(f"clustersync / vanilla: node CPU per page {ours['node'] / theirs['node']:.3f}, "
              f"main thread {ours['main'] / theirs['main']:.3f}, "
              f"with redis-server {(ours['node'] + ours['redis-server']) / theirs['node']:.3f}; "
              f"pages/s {ours['pages/s'] / theirs['pages/s']:.3f}")


def print_instructions(engines: list[str], pages: int, cap_s: float) -> None:
    """Instructions per page by thread, from a small and a large crawl under callgrind."""
    sizes = (pages // 3, pages)
    counted: dict[str, list[Round]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="clustersync-node-cpu-") as tmp:
        for size in sizes:
            with SiteProcess(size) as site:
                for engine in engines:
                    label = f"{engine.replace('@', '-at-').replace('/', '_')}-{size}"
                    r = crawl_once(engine, site, Path(tmp), label, cap_s, callgrind=True)
                    counted[engine].append(r)
                    print(f"  {engine} {r.pages} pages: {dict(r.instructions)}", flush=True)
    per_page: dict[str, dict[str, float]] = {}
    for engine, (small, large) in counted.items():
        extra = large.pages - small.pages
        per_page[engine] = {
            thread: (large.instructions.get(thread, 0) - small.instructions.get(thread, 0))
            / extra for thread in ("main", "others")}
        row = per_page[engine]
        print(f"{engine}: instructions per page: main {row['main']:,.0f}, other threads "
              f"{row['others']:,.0f}, all {row['main'] + row['others']:,.0f}")
    if "vanilla" in per_page:
        base = per_page["vanilla"]
        for engine, row in per_page.items():
            if engine != "vanilla":
                print(f"{engine} / vanilla: main {row['main'] / base['main']:.3f}, all "
                      f"{(row['main'] + row['others']) / (base['main'] + base['others']):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds per crawl at most")
    parser.add_argument("--only", choices=("vanilla", "clustersync"), default=None)
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                        help="also run clustersync with the package in DIR (e.g. a git worktree "
                             "of an older commit) first on PYTHONPATH: an A/B comparison")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions instead (valgrind): each node crawls a site "
                             "of PAGES/3 pages and one of PAGES; the difference, per page, by "
                             "thread, leaves start-up and close out (slow: minutes per crawl)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="record each node with py-spy into DIR (slows the nodes down)")
    args = parser.parse_args(argv)
    if redis_server_binary() is None:
        print("redis-server not found: install it (apt-get install redis-server)", file=sys.stderr)
        return 2
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    engines = [args.only] if args.only else ["vanilla", "clustersync"]
    if args.baseline is not None:
        engines.append(f"clustersync@{args.baseline.resolve()}")
    if args.callgrind:
        print_instructions(engines, args.pages, args.cap)
        return 0
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="clustersync-node-cpu-") as tmp, \
            SiteProcess(args.pages) as site:
        for repeat in range(args.repeat):
            for engine in engines:
                label = f"{engine.replace('@', '-at-').replace('/', '_')}-r{repeat}"
                r = crawl_once(engine, site, Path(tmp), label, args.cap, args.profile)
                rounds.append(r)
                cells = ", ".join(f"{k} {v:.3f}" for k, v in r.cpu_ms_per_page.items())
                switches = ", ".join(f"{k} {v:.2f}" for k, v in r.switches_per_page.items())
                print(f"  {engine} r{repeat}: {r.pages} pages, {r.pages_per_s:.0f} pages/s; "
                      f"CPU ms/page: {cells}; context switches/page: {switches}", flush=True)
    print_table(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
