"""Test nodes forked from a preloaded zygote (testkit/zygote.py) instead of started cold.

A node started cold spends about a second of CPU importing Scrapy, Twisted and the add-on
before it crawls anything; a node forked from a process that did it once spends none of it,
and is still a real ``scrapy crawl`` process, with its own pid, that SIGKILL, SIGSTOP and SIGTERM
reach. The zygote is a child of this process; a node is a grandchild of the zygote, so its exit
status comes over the zygote's socket: `ForkedNode` turns it into what `subprocess.Popen` shows.

A plain ``python -m scrapy crawl`` subprocess is used instead whenever forking could change the
node: an environment whose ``PYTHON*`` options differ from the zygote's (they act at interpreter
start-up), or a ``PYTHONPATH`` entry that holds a package the zygote has already imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .nodes import NodeProcess, crawl_arguments, node_environment, start_node

__all__ = ["ForkedNode", "Zygote"]

ZYGOTE_SCRIPT = Path(__file__).with_name("zygote.py")
#: how long the zygote may take to import Scrapy, Twisted and the add-on on a busy machine
START_TIMEOUT_S = 60.0


class ForkedNode:
    """A node forked by the zygote, used as a `subprocess.Popen` of it would be."""

    def __init__(self, args: list[str], connection: socket.socket, pid: int, pending: bytes):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._connection = connection
        self._pending = pending
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit code if the node has ended (``-N`` after signal N), else None."""
        if self.returncode is None and self._lock.acquire(blocking=False):
            try:
                self._read_exit(0.0)
            finally:
                self._lock.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code once the node has ended; `subprocess.TimeoutExpired` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._read_exit(deadline)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read_exit(self, deadline: float | None) -> None:
        """Read the handler's ``exit STATUS`` line until ``deadline`` (0.0: what has come)."""
        while self.returncode is None:
            line, found, rest = self._pending.partition(b"\n")
            if found:
                self._pending = rest
                self.returncode = os.waitstatus_to_exitcode(int(line.removeprefix(b"exit ")))
                self._connection.close()
                return
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._connection], [], [], remaining)[0]:
                return
            data = self._connection.recv(4096)
            if not data:
                raise ChildProcessError(f"the zygote's handler of node {self.pid} went away")
            self._pending += data


class Zygote:
    """Starts on first use a zygote child process; `start_node` forks nodes from it.

    ``options`` are ``PYTHON*`` variables the zygote's interpreter starts with (such as
    ``PYTHONHASHSEED``): only nodes whose environment sets them alike are forked from it.
    """

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        self._given = dict(options or {})
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._directory = Path()
        self._preloaded: frozenset[str] = frozenset()
        self._options: dict[str, str] = {}

    def start_node(
        self,
        spider: str,
        *,
        cwd: Path,
        log_path: Path,
        spider_args: Mapping[str, str] | None = None,
        settings: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        pythonpath: Sequence[Path] = (),
        options: Sequence[str] = (),
    ) -> NodeProcess:
        """What `testkit.nodes.start_node` starts, with the same arguments, forked when that
        cannot change the node (see the module's docstring), else as a plain subprocess."""
        node_env = node_environment(env, pythonpath)
        if not self._can_fork(node_env):
            return start_node(spider, cwd=cwd, log_path=log_path, spider_args=spider_args,
                              settings=settings, env=env, pythonpath=pythonpath,
                              options=options)
        if not Path(cwd).is_dir():
            raise FileNotFoundError(f"no directory {cwd} to start a node in")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")  # it exists, empty, once this returns, as with Popen
        arguments = crawl_arguments(spider, spider_args, settings, options)
        request = {"argv": arguments, "cwd": str(cwd), "env": node_env, "log": str(log_path)}
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(str(self._directory / "socket"))
        connection.sendall(json.dumps(request).encode() + b"\n")
        pending = b""
        while b"\n" not in pending:
            data = connection.recv(4096)
            if not data:
                raise ChildProcessError(f"the zygote did not start a node:\n{self.log()}")
            pending += data
        line, _, rest = pending.partition(b"\n")
        pid = int(line.removeprefix(b"pid "))
        return ForkedNode([sys.executable, "-m", "scrapy", *arguments], connection, pid, rest)

    def log(self) -> str:
        """What the zygote itself wrote to stderr (empty unless something went wrong)."""
        path = self._directory / "zygote.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def stop(self) -> None:
        """Close the zygote's stdin: it waits a while for nodes still running, then exits."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def _can_fork(self, node_env: Mapping[str, str]) -> bool:
        self._ensure_started()
        if _interpreter_options(node_env) != self._options:
            return False
        entries = [entry for entry in node_env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        return not any(_holds_package(Path(entry), self._preloaded) for entry in entries)

    def _ensure_started(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            self._directory = Path(tempfile.mkdtemp(prefix="zygote-"))
            env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
            env.update(self._given)
            with (self._directory / "zygote.log").open("wb") as log:
                self._process = subprocess.Popen(
                    [sys.executable, str(ZYGOTE_SCRIPT), str(self._directory / "socket")],
                    cwd=self._directory, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=log)
            self._preloaded = frozenset(json.loads(self._ready_line().removeprefix(b"READY ")))
            self._options = _interpreter_options(env)

    def _ready_line(self) -> bytes:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        if select.select([stdout], [], [], START_TIMEOUT_S)[0]:
            line = stdout.readline()
            if line.startswith(b"READY "):
                return line
        self._process.kill()
        raise ChildProcessError(f"the zygote did not start:\n{self.log()}")


def _interpreter_options(env: Mapping[str, str]) -> dict[str, str]:
    """The environment variables a Python interpreter reads once, at start-up."""
    return {key: value for key, value in env.items()
            if key.startswith("PYTHON") and key != "PYTHONPATH"}


def _holds_package(entry: Path, packages: frozenset[str]) -> bool:
    """Whether ``entry`` (a sys.path directory) holds a module or package named in ``packages``."""
    try:
        names = os.listdir(entry)
    except OSError:
        return False
    for name in names:
        stem, dot, suffix = name.partition(".")
        if stem in packages and ((not dot and (entry / name).is_dir())
                                 or suffix in ("py", "pyc") or suffix.endswith("so")):
            return True
    return False
