"""Counting the Redis commands a run sends, the way the design budget counts them.

Redis's ``INFO commandstats`` (and ``total_commands_processed``) also count every command a Lua
script runs, so a script call that touches ten keys would count as eleven. The budget ("at most
one Redis command per crawled page") counts what the nodes send: a script call is one command.
`CommandCounter` gets that number from ``MONITOR``, where a command run by a script is tagged
``[<db> lua]``: client commands = MONITOR lines - script lines. The per-command breakdown from
``INFO commandstats`` is kept too, script commands included, to show where the work goes.
"""

from __future__ import annotations

import socket
import threading
import uuid
from typing import Any

MONITOR_CHUNK_BYTES = 1 << 16
SCRIPT_TAG = b' lua] "'  # then the quoted command name; quotes in arguments are escaped
DRAIN_TIMEOUT_S = 30.0
BENCH_OWN_COMMANDS = ("info", "monitor", "echo")


class CommandCounter:
    """Counts commands on one redis-server from `start` to `stop`, through a MONITOR connection.

    The connection's reader thread only counts bytes (``bytes.count`` runs in C), so it costs
    the measured crawl next to nothing. MONITOR escapes newlines inside arguments, so each
    command is exactly one line.
    """

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self.lines = 0
        self.script_lines = 0
        self._marker = f"bench-end-{uuid.uuid4().hex}".encode()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    @property
    def client_commands(self) -> int:
        """Commands sent by clients (a script call counts once; the end marker not at all)."""
        return self.lines - self.script_lines

    def start(self) -> CommandCounter:
        sock = socket.create_connection((self.host, self.port), timeout=DRAIN_TIMEOUT_S)
        sock.sendall(b"MONITOR\r\n")
        reply = _read_line(sock)
        if reply != b"+OK":
            raise RuntimeError(f"MONITOR refused on port {self.port}: {reply!r}")
        self._sock = sock
        self._thread = threading.Thread(target=self._count, name="bench-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Send an end marker on another connection and count everything up to it."""
        if self._sock is None or self._thread is None:
            return
        with socket.create_connection((self.host, self.port), timeout=5) as marker:
            marker.sendall(b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (len(self._marker), self._marker))
            _read_line(marker)
        self._done.wait(DRAIN_TIMEOUT_S)
        self._sock.close()
        self._thread.join(5)
        self._sock = self._thread = None

    def _count(self) -> None:
        assert self._sock is not None
        carry = b""
        while True:
            try:
                chunk = self._sock.recv(MONITOR_CHUNK_BYTES)
            except OSError:
                return
            if not chunk:
                return
            data = carry + chunk
            cut = len(carry) - len(SCRIPT_TAG) + 1 if carry else 0
            self.lines += chunk.count(b"\n")
            self.script_lines += data.count(SCRIPT_TAG, max(0, cut))
            if self._marker in data:
                self.lines -= 1  # the marker's own ECHO line
                self._done.set()
                return
            carry = data[-(len(SCRIPT_TAG) - 1) :]


def _read_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        byte = sock.recv(1)
        if not byte:
            break
        line += byte
    return line.rstrip(b"\r\n")


def commandstats(client: Any) -> dict[str, int]:
    """Command name -> calls so far, from ``INFO commandstats`` (script commands included)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def commandstats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls per command between two `commandstats` snapshots, without the bench's own calls."""
    delta = {name: calls - before.get(name, 0) for name, calls in after.items()}
    for own in BENCH_OWN_COMMANDS:
        delta.pop(own, None)
    return {name: calls for name, calls in sorted(delta.items()) if calls > 0}


def slowest_call(client: Any) -> tuple[float, str] | None:
    """The slowest command in the SLOWLOG (ms, name), or None if none took 10 ms or more.

    A fresh server's SLOWLOG holds only the run's commands. A script's time counts as its own.
    """
    entries = client.slowlog_get(128)
    if not entries:
        return None
    worst = max(entries, key=lambda entry: entry["duration"])
    command = worst["command"]
    name = command.split(b" ", 1)[0] if isinstance(command, bytes) else str(command).split()[0]
    return worst["duration"] / 1000, name.decode() if isinstance(name, bytes) else name
