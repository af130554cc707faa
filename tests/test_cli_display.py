"""What `clustersync` prints for people: `top` and `nodes` fit the terminal they run in (a real
terminal: tmux, at 80x24 and 220 columns), `top` waits for a job that does not exist yet, and
text read from Redis (task ids, URLs, errors, node records) is printed as it is, never as rich
markup. Nodes here are real heartbeats into a real redis-server, with the records a node sends
(node/node_record.py); the CLI runs in-process, but in tmux, where it runs as a process."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.node.node_record import NodeInfo
from scrapy_clustersync.store import JobStore, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.write_ops import DeadLetterEntry, Failed, TaskPush
from testkit.redis_server import RedisServer

from conftest import running_in_ci
from support import clustersync, push_op, wait_until

ROOT = Path(__file__).resolve().parents[1]
#: node ids as long as real ones on cloud machines (host:pid:random)
NODE_IDS = [f"ip-10-0-12-{30 + i}.ec2.internal:{40120 + i}:a1b2c{i}" for i in range(3)]
#: markup rich would read: bold, a closing tag with nothing open (MarkupError), a link
MARKUP = "[bold]x[/] [/] [link=x]y[/link]"
ELLIPSIS = "…"


class Terminal:
    """A tmux window of a given size on a private tmux server (never the user's)."""

    def __init__(self, width: int, height: int) -> None:
        self.socket = f"clustersync-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", os.devnull, *args],
                              capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout

    def run(self, *argv: str) -> None:
        """Run ``argv`` in the window; the window stays after it exits ("exited N"). The
        terminal's size is the window's: COLUMNS and LINES (pytest may set them) are unset."""
        command = f"env -u COLUMNS -u LINES {shlex.join(argv)}; echo exited $?; sleep 600"
        self.tmux("new-session", "-d", "-s", "t", "-x", str(self.width), "-y", str(self.height),
                  "sh", "-c", command)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=30, check=False)


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    """``terminal(width, height)``: a tmux window; skipped without tmux (failed under CI)."""
    if shutil.which("tmux") is None:
        message = "tmux not found: install it with `apt-get install tmux` (scripts/ensure-tmux.sh)"
        if running_in_ci():
            pytest.fail(f"{message} (CI=true: the terminal tests must run)")
        pytest.skip(message)
    opened: list[Terminal] = []

    def make(width: int, height: int) -> Terminal:
        window = Terminal(width, height)
        opened.append(window)
        return window

    yield make  # type: ignore[misc]
    for window in opened:
        window.close()


def clustersync_argv(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url", url, *args]


def beat_as_node(url: str, job: str, node_id: str, pages: int,
                 extra: Mapping[str, object] | None = None) -> JobStore:
    """Node ``node_id`` joins ``job`` and sends one heartbeat with the record a node sends,
    crawling, ``pages`` fetched."""
    store = JobStore(make_client(url), job, node_id, DedupSettings("exact"))
    epoch, _ = store.join(ttl_ms=600_000)
    record = NodeInfo(None, "shop", False, lambda: 3, node_id=node_id).snapshot()
    record.update(pages=pages, pages_per_min=pages * 2.5, state="crawling", leased=12,
                  prefetched=4, buffered=0, **(extra or {}))
    store.heartbeat(epoch, ttl_ms=600_000, lease_ms=600_000, info=record, idle=False,
                    idle_after_ms=1000, lease_ids=[])
    return store


def row_of(screen: str, node_id: str) -> str:
    rows = [line for line in screen.splitlines() if node_id in line]
    assert len(rows) == 1, screen
    return rows[0]


def test_top_in_an_80x24_terminal_shows_every_nodes_id_state_and_rate_in_full(
    redis_server: RedisServer, terminal: type[Terminal]
) -> None:
    # given a job crawled by three nodes with ids as long as a cloud machine's
    for i, node_id in enumerate(NODE_IDS):
        beat_as_node(redis_server.url, "shop", node_id, pages=1000 * (i + 1))
    # when `top` runs in an 80x24 terminal
    window = terminal(80, 24)
    window.run(*clustersync_argv(redis_server.url, "top", "shop", "--interval", "0.5"))
    wait_until(lambda: all(n in window.screen() for n in NODE_IDS), 60, "top shows the nodes")
    screen = window.screen()
    print(screen)
    # then each node is one row with its whole id, its state and its pages/min, and no cell is
    # cut short
    for i, node_id in enumerate(NODE_IDS):
        cells = row_of(screen, node_id).split()
        assert cells[:3] == [node_id, "crawling", f"{2500 * (i + 1)}"], screen
    assert ELLIPSIS not in screen
    assert all(len(line) <= 80 for line in screen.splitlines())


def test_nodes_at_220_columns_lists_each_node_on_one_line_with_no_cell_cut(
    redis_server: RedisServer, terminal: type[Terminal]
) -> None:
    # given three nodes, one on another Scrapy version
    for i, node_id in enumerate(NODE_IDS):
        extra = {"versions": {"clustersync": "0.1.0", "python": "3.11.7",
                              "scrapy": "2.13.0" if i == 2 else "2.19.0"}}
        beat_as_node(redis_server.url, "shop", node_id, pages=10, extra=extra)
    # when `nodes` runs in a terminal 220 columns wide
    window = terminal(220, 30)
    window.run(*clustersync_argv(redis_server.url, "nodes", "shop"))
    wait_until(lambda: "exited" in window.screen(), 60, "nodes prints its table")
    screen = window.screen()
    print(screen)
    # then every node is one line, nothing is cut, and the versions (they differ) are shown
    table = [line for line in screen.splitlines() if line.strip()][:-1]  # but "exited 0"
    assert len(table) == 2 + len(NODE_IDS), screen
    assert "scrapy 2.13.0" in row_of(screen, NODE_IDS[2]) and ELLIPSIS not in screen
    assert "exited 0" in screen


def test_top_started_before_the_job_exists_waits_for_it_then_shows_it(
    redis_server: RedisServer, terminal: type[Terminal]
) -> None:
    # given `top` started for a job that does not exist yet
    window = terminal(80, 24)
    window.run(*clustersync_argv(redis_server.url, "top", "later", "--interval", "0.3"))
    wait_until(lambda: "does not exist yet" in window.screen(), 60, "top says it waits")
    # when a node joins the job
    time.sleep(1)  # (several refreshes: it keeps waiting, it does not exit)
    assert "exited" not in window.screen()
    beat_as_node(redis_server.url, "later", NODE_IDS[0], pages=5)
    # then top shows it, still running
    wait_until(lambda: NODE_IDS[0] in window.screen(), 60, "top shows the job's node")
    screen = window.screen()
    print(screen)
    assert "does not exist yet" not in screen and "exited" not in screen


def test_text_from_redis_is_printed_as_it_is_never_as_markup(redis_server: RedisServer) -> None:
    # given a job whose task id, failed URL, error, dead letter reason and node record all
    # hold what rich would read as markup
    node = f"n{MARKUP}"
    store = beat_as_node(redis_server.url, "shop", node, pages=3,
                         extra={"host": f"h{MARKUP}", "spider": MARKUP})
    epoch, _ = store.join(ttl_ms=600_000)
    task = f"t{MARKUP}"
    store.flush(epoch, [_task_push(task), push_op("http://a/2")], new_call_id())
    first, second = (e.entry_id for e in store.lease(epoch, 2, 600_000, new_call_id()))
    store.flush(epoch, [Failed(first, f"http://a/{MARKUP}", 500, f"Error {MARKUP}", 2, False),
                        DeadLetterEntry(second, f"reason {MARKUP}")], new_call_id())
    # when every command that prints them runs
    runs = {args: clustersync(redis_server.url, *args) for args in [
        ("tasks", "shop"), ("task", "shop", task), ("failed", "shop"), ("dead", "shop"),
        ("status", "shop"), ("status", "shop", "--all"), ("nodes", "shop"),
        ("top", "shop", "-n", "1"), ("jobs",)]}
    # then each succeeds and shows the text as it is
    for args, run in runs.items():
        print(args, run.stdout, sep="\n")
        assert run.returncode == 0 and "Traceback" not in run.output, (args, run.output)
    assert task in runs[("tasks", "shop")].stdout and task in runs[("task", "shop", task)].stdout
    assert f"Error {MARKUP}" in runs[("tasks", "shop")].stdout
    failed = runs[("failed", "shop")].stdout
    assert f"http://a/{MARKUP}" in failed and f"Error {MARKUP}" in failed and task in failed
    assert f"reason {MARKUP}" in runs[("dead", "shop")].stdout
    for args in [("status", "shop"), ("status", "shop", "--all"), ("nodes", "shop"),
                 ("top", "shop", "-n", "1")]:
        assert node in runs[args].stdout, (args, runs[args].stdout)
    assert f"h{MARKUP}" in runs[("nodes", "shop")].stdout


def _task_push(task: str) -> TaskPush:
    pushed = push_op("http://a/1")
    return TaskPush(pushed.fingerprint, pushed.priority, pushed.request, pushed.flags,
                    pushed.site, task)
