"""Throw-away Redis servers for tests, demos and benchmarks.

`RedisServer` runs a real ``redis-server`` child process on a free port of 127.0.0.1 with its
data and log in a directory the caller owns; it never touches port 6379 or any Redis it did not
start. `EmbeddedRedis` serves fakeredis over TCP, for machines without a ``redis-server``
binary (the demo fallback; fakeredis runs Lua scripts only when ``lupa`` is installed).
`start_any_redis` picks the real binary when there is one.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from ._service import RedisClients, Service, serve_in_thread

__all__ = [
    "EmbeddedRedis",
    "RedisServer",
    "RedisReplyError",
    "free_port",
    "ping",
    "redis_command",
    "redis_server_binary",
    "redis_url",
    "start_any_redis",
]

REDIS_SERVER_BIN_ENV = "REDIS_SERVER_BIN"
LOCALHOST = "127.0.0.1"
_STOP_TIMEOUT_S = 10.0
_POLL_INTERVAL_S = 0.01
_PORT_ATTEMPTS = 5
_LOG_TAIL_CHARS = 2000
#: where `free_port` looks: below Linux's ephemeral ports, above most fixed services'
_PORT_RANGE = (10_000, 31_999)


def redis_server_binary() -> str | None:
    """Path of the ``redis-server`` to run: ``$REDIS_SERVER_BIN`` if set, else the one on PATH.

    Returns None when there is none (callers skip or fall back to `EmbeddedRedis`).
    """
    override = os.environ.get(REDIS_SERVER_BIN_ENV)
    if override:
        return shutil.which(override) or (override if os.access(override, os.X_OK) else None)
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago (never 6379).

    Chosen below the OS's ephemeral range (32768-60999 on Linux), so no OS-chosen port (a
    client connection, a service started on port 0) takes it between this check and its use,
    nor while a restarted server is down; each pytest-xdist worker draws from its own block,
    so two workers never hand out the same port.
    """
    first, last = _port_block()
    rng = random.Random()
    while True:
        port = rng.randint(first, last)
        if port == 6379:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOCALHOST, port))
            except OSError:
                continue
        return port


def _port_block() -> tuple[int, int]:
    """The ports this process may hand out: all of them, or its xdist worker's share."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or count < 1:
        return _PORT_RANGE
    first, last = _PORT_RANGE
    size = (last - first + 1) // count
    start = first + int(worker[2:]) % count * size
    return start, start + size - 1


def redis_url(port: int, db: int = 0, password: str | None = None, host: str = LOCALHOST) -> str:
    """``redis://[:password@]host:port/db``, the password percent-encoded."""
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/{db}"


class RedisReplyError(Exception):
    """Redis answered a command with an error reply (``-ERR ...``)."""


def redis_command(
    port: int, *parts: bytes, password: str | None = None, timeout_s: float = 1.0
) -> bytes:
    """Send one command on a fresh connection (after AUTH when a password is given).

    Returns a simple or bulk reply's payload (b"" for nil). Raises RedisReplyError on an error
    reply and OSError when nothing answers. Standard library only, for readiness checks.
    """
    with socket.create_connection((LOCALHOST, port), timeout=timeout_s) as sock:
        replies = sock.makefile("rb")
        if password is not None:
            sock.sendall(_resp_command(b"AUTH", password.encode()))
            _read_reply(replies)
        sock.sendall(_resp_command(*parts))
        return _read_reply(replies)


def ping(port: int, password: str | None = None, timeout_s: float = 1.0) -> bool:
    """True when the Redis on ``port`` answers PING with PONG (so it is up and done loading)."""
    try:
        return redis_command(port, b"PING", password=password, timeout_s=timeout_s) == b"PONG"
    except (OSError, RedisReplyError):
        return False


def server_pid(port: int, password: str | None = None) -> int | None:
    """The ``process_id`` the Redis on ``port`` reports, or None if it does not answer."""
    try:
        info = redis_command(port, b"INFO", b"server", password=password)
    except (OSError, RedisReplyError):
        return None
    for line in info.splitlines():
        if line.startswith(b"process_id:"):
            return int(line.split(b":", 1)[1])
    return None


def _resp_command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    out.extend(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)
    return b"".join(out)


def _read_reply(replies: BinaryIO) -> bytes:
    line = replies.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionResetError("connection closed before a full reply")
    kind, payload = line[:1], line[1:-2]
    if kind == b"-":
        raise RedisReplyError(payload.decode(errors="replace"))
    if kind == b"$":
        size = int(payload)
        return b"" if size < 0 else replies.read(size + 2)[:-2]
    return payload


class RedisServer(Service, RedisClients):
    """One ``redis-server`` child process on 127.0.0.1, data and log in ``directory``.

    Without persistence nothing is ever written to disk, so a restart loses every key. With
    ``persistence=True`` every write is appended and fsynced (AOF, ``appendfsync always``), so
    a graceful `stop` or `restart` keeps every acknowledged write; RDB snapshots stay off.
    The port is chosen at construction (unless given), so `url` is known before `start`.
    """

    def __init__(
        self,
        directory: str | Path,
        port: int | None = None,
        persistence: bool = False,
        password: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory)
        self._fixed_port = port is not None
        self.port: int = port if port is not None else free_port()
        self.persistence = persistence
        self.password = password
        self.extra_args = tuple(extra_args)
        self._process: subprocess.Popen[bytes] | None = None
        RedisClients.__init__(self)

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:PORT/0``."""
        return redis_url(self.port, password=self.password)

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    @property
    def pid(self) -> int | None:
        """Process id while running, else None."""
        return self._process.pid if self.is_running() and self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command_line(self) -> list[str]:
        """The exact argv used to start the server."""
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError(
                "redis-server not found: install it (e.g. `apt-get install redis-server`) "
                f"or set {REDIS_SERVER_BIN_ENV}"
            )
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            LOCALHOST,
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.log_path),
        ]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.password is not None:
            args += ["--requirepass", self.password]
        return args + list(self.extra_args)

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and return self once it answers PING.

        When the port was chosen here and turns out to be taken, another free port is tried.
        Raises RuntimeError (with the end of the server log) if it exits or stays silent.
        """
        if self.is_running():
            raise RuntimeError(f"redis-server already running on port {self.port}")
        self.directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(_PORT_ATTEMPTS):
            if self._spawn_and_wait(timeout_s):
                return self
            if self._fixed_port or attempt == _PORT_ATTEMPTS - 1:
                break
            self.port = free_port()
        raise RuntimeError(f"redis-server on port {self.port} did not start:\n{self._log_tail()}")

    def _spawn_and_wait(self, timeout_s: float) -> bool:
        """Spawn the process; True once it answers PING, False if it exited or timed out."""
        self._process = subprocess.Popen(
            self.command_line(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            answering = self.answering_pid()
            if answering is not None:
                # Something answers; make sure it is ours and not a server already on the port.
                if answering == self._process.pid:
                    return True
                self.kill()
                return False
            time.sleep(_POLL_INTERVAL_S)
        self.kill()
        return False

    def answering_pid(self) -> int | None:
        """The process id of the server that answers on ``port``, None while none answers
        (a subclass that speaks TLS or is a sentinel asks its own way)."""
        if not ping(self.port, self.password, timeout_s=0.5):
            return None
        return server_pid(self.port, self.password)

    def stop(self) -> None:
        """Graceful shutdown: SIGTERM and wait (with persistence the AOF is flushed). Idempotent.

        Falls back to SIGKILL after 10 s. Clients from `client()` are disconnected (they
        reconnect on their next command).
        """
        self._close_clients()
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Hard crash: SIGKILL and reap. Idempotent."""
        self._close_clients()
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.kill()
        process.wait()

    def restart(self, down_s: float = 0.0, timeout_s: float = 10.0, crash: bool = False) -> None:
        """Stop (``crash``: SIGKILL, nothing saved), stay down ``down_s`` seconds, start again
        on the same port and dir (it loads what it had persisted, if anything)."""
        if crash:
            self.kill()
        else:
            self.stop()
        if down_s > 0:
            time.sleep(down_s)
        self._fixed_port = True  # clients hold this URL; never move to another port
        self.start(timeout_s=timeout_s)

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError as exc:
            return f"(no log: {exc})"

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, dir={str(self.directory)!r})"


class EmbeddedRedis(Service, RedisClients):
    """fakeredis served over TCP in this process: the same surface as `RedisServer`.

    For machines without ``redis-server`` only (the demo fallback): no persistence, no
    password, and Lua scripting only if ``lupa`` is installed. Data lives as long as this
    object, so `restart` keeps it (unlike a real server without persistence).
    """

    password: str | None = None
    persistence = False

    def __init__(self, directory: str | Path | None = None, port: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.port: int = port if port is not None else 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._fake_server: Any = None
        RedisClients.__init__(self)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return redis_url(self.port)

    def is_running(self) -> bool:
        return self._server is not None

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        """Listen on 127.0.0.1 (port chosen by the OS unless given) and serve in a thread."""
        from fakeredis import TcpFakeServer

        if self._server is not None:
            raise RuntimeError(f"EmbeddedRedis already running on port {self.port}")
        server = TcpFakeServer((LOCALHOST, self.port))
        server.daemon_threads = True  # never hold up interpreter exit
        if self._fake_server is not None:
            server.fake_server = self._fake_server  # keep data across restart()
        self._fake_server = server.fake_server
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = serve_in_thread(server, f"EmbeddedRedis:{self.port}")
        if not _wait_for(lambda: ping(self.port), timeout_s):
            self.stop()
            raise RuntimeError(f"embedded redis on port {self.port} did not answer PING")
        return self

    def stop(self) -> None:
        """Stop serving and drop every connection. Idempotent."""
        self._close_clients()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()  # also tells the connection handlers to finish
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    kill = stop

    def restart(self, down_s: float = 0.0, timeout_s: float = 10.0) -> None:
        """Stop, stay down ``down_s`` seconds, serve again on the same port (data kept)."""
        self.stop()
        if down_s > 0:
            time.sleep(down_s)
        self.start(timeout_s=timeout_s)


def _wait_for(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(_POLL_INTERVAL_S)
    return False


def start_any_redis(directory: str | Path, **kwargs: Any) -> RedisServer | EmbeddedRedis:
    """A started Redis: a real `RedisServer` when a binary exists, else an `EmbeddedRedis`.

    ``kwargs`` go to `RedisServer` (only ``port`` is passed on to `EmbeddedRedis`).
    """
    if redis_server_binary() is not None:
        return RedisServer(directory, **kwargs).start()
    return EmbeddedRedis(directory, port=kwargs.get("port")).start()
