"""Real `scrapy crawl` node processes for the end-to-end tests, and what to check about them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scrapy_clustersync.testing.site import TestSite

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PROJECT = ROOT / "example_project"

#: Settings that make small test crawls finish fast; a test may override any of them.
FAST_SETTINGS = {
    "CLUSTERSYNC_IDLE_CLOSE_AFTER": "1",
    "CLUSTERSYNC_HEARTBEAT_INTERVAL": "0.3",
    "CLUSTERSYNC_LEASE_TIMEOUT": "3",
    "LOG_LEVEL": "INFO",
}


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
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
    settings: Mapping[str, str] | None = None,
    project_dir: Path = EXAMPLE_PROJECT,
    spider: str = "site",
) -> Node:
    """Start ``scrapy crawl`` as a cluster node; its User-Agent is ``name`` (the site counts it)."""
    merged = {**FAST_SETTINGS, "USER_AGENT": name,
              "CLUSTERSYNC_SPOOL_DIR": str(workdir / "spool"), **(settings or {})}
    command = [sys.executable, "-m", "scrapy", "crawl", spider, "-a", f"start_url={start_url}"]
    for key, value in merged.items():
        command += ["-s", f"{key}={value}"]
    env = {**os.environ, "CLUSTERSYNC_REDIS_URL": redis_url}
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=project_dir, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    return Node(name, process, log_path)


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
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def pages_fetched(site: TestSite) -> int:
    return sum(site.hits().values())


def missing_pages(site: TestSite) -> list[str]:
    hits = site.hits()
    return [path for path in site.page_paths() if hits.get(path, 0) == 0]


def pages_fetched_twice(site: TestSite) -> dict[str, int]:
    return {path: count for path, count in site.hits().items() if count > 1}
