"""What a node sends Redis before its first page: the join's round trips, counted.

    python bench/join_round_trips.py [--baseline REV]

Starts its own redis-server with a MONITOR attached, and one node (the bench's project, the
example spider) on a one-page site; lists every command the node sent, in order, up to its
first page fetch, and how many connections it opened before then. Each command there is a
round trip (the node pipelines none of them), and each connection one more (its TCP
handshake): far from Redis, each costs the node that long before its first page.
``--baseline REV`` counts the package at git revision REV too (bench/baseline.py).
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from baseline import baseline_python
from runner import BENCH_DIR, EXAMPLE_PROJECT

from testkit.nodes import start_node
from testkit.redis_server import RedisServer
from testkit.site import TestSite

LINE = re.compile(rb'^\+?([0-9.]+) \[\d+ ([^\]]+)\] "([^"]+)"(.*)$')
#: a call of lease.lua (its first keys), whatever the version of its text
LEASE_CALL = re.compile(rb'"9" "[^"]*:meta" "[^"]*:queue" "[^"]*:entries" "[^"]*:deadlines"')


def monitor(port: int, lines: list[bytes], stop: threading.Event) -> threading.Thread:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"MONITOR\r\n")

    def read() -> None:
        carry = b""
        while not stop.is_set():
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            *done, carry = (carry + chunk).split(b"\r\n")
            lines.extend(done)
        sock.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def count(python: Path | None, label: str) -> None:
    with tempfile.TemporaryDirectory() as work, TestSite(1) as site:
        server = RedisServer(Path(work) / "redis").start()
        lines: list[bytes] = []
        stop = threading.Event()
        monitor(server.port, lines, stop)
        node = start_node(
            "site", cwd=Path(work), log_path=Path(work) / "node.log",
            spider_args={"start_url": site.start_url},
            settings={"CLUSTERSYNC_REDIS_URL": server.url, "CLUSTERSYNC_IDLE_CLOSE_AFTER": "0.2",
                      "USER_AGENT": "round-trips"},
            env={"SCRAPY_SETTINGS_MODULE": "benchproj.settings_clustersync"},
            pythonpath=[BENCH_DIR, EXAMPLE_PROJECT], python=python)
        node.wait(120)
        stop.set()
        server.stop()
        first = site.agent_hits("round-trips").first
    fetched_at = (first or 0.0) + time.time() - time.monotonic()  # the site's clock is monotonic
    report(label, lines, fetched_at)


def report(label: str, lines: list[bytes], fetched_at: float) -> None:
    sent: list[str] = []
    clients: list[bytes] = []
    for line in lines:
        match = LINE.match(line)
        if match is None or match.group(2) == b"lua":
            continue
        at, client, name, rest = match.groups()
        if float(at) > fetched_at:
            break
        if client not in clients:
            clients.append(client)
        kind = " (lease)" if LEASE_CALL.search(rest) else ""
        sent.append(f"{name.decode()}{rest.decode(errors='replace')[:60]}{kind}")
    print(f"{label}: {len(sent)} commands and {len(clients)} connections before the first page")
    for command in sent:
        print(f"  {command}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", metavar="REV")
    args = parser.parse_args()
    if args.baseline:
        commit, python = baseline_python(args.baseline)
        count(python, f"at {commit}")
    count(None, "this checkout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
