"""A fork server for test nodes: imports Scrapy, Twisted and the add-on once, then forks a
real ``scrapy crawl`` process per request (`testkit.forked` is its client).

Run as a script, never imported by the project: ``python testkit/zygote.py SOCKET``. It takes
no reactor (``twisted.internet.reactor`` is never imported here: each node installs the one its
settings name), no project module and no thread; it prints ``READY`` and the top-level packages
it holds, then serves until its stdin closes. Each connection to ``SOCKET`` carries one JSON
request ``{"argv", "cwd", "env", "log"}`` and gets back ``pid N`` once the node runs and
``exit STATUS`` (the raw wait status) once it has ended: a handler forked per connection forks
the node and waits for it, so the zygote itself never blocks on a node.

The node is what ``python -m scrapy crawl`` would be: cwd, environment, ``sys.argv`` and
``sys.path`` (cwd first, then ``PYTHONPATH``) as that command would have them, stdin from
/dev/null, stdout and stderr to the log file, and `scrapy.cmdline.execute` run as the main
program, so that its exit, uncaught errors, thread joins and atexit handlers go through the
interpreter's own shutdown. What it shares with its siblings is only what a fresh interpreter
fixes at start-up: the str hash seed and the ``PYTHON*`` options (the client uses a plain
subprocess when a node's environment sets those differently).
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this script's directory (testkit/) must not shadow anything in a node

import contextlib
import gc
import importlib
import json
import pkgutil
import select
import signal
import socket
import time
from typing import Any

#: how long, once told to stop, the zygote waits for handlers whose nodes still run
STOP_GRACE_S = 10.0
BASE_PATH = list(sys.path)


def preload() -> None:
    """Import what every ``scrapy crawl`` node of the add-on imports, except a reactor."""
    import scrapy.cmdline
    import scrapy.commands
    import scrapy.crawler
    from scrapy.settings import default_settings
    from scrapy.utils.misc import load_object

    import scrapy_clustersync

    names = [info.name for package in (scrapy.commands, scrapy_clustersync)
             for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
             if not info.name.endswith("__main__")]
    for name in names:
        _try(importlib.import_module, name)
    for name in dir(default_settings):  # the components a crawl loads from Scrapy's defaults
        for path in _dotted_paths(getattr(default_settings, name)):
            _try(load_object, path)
    if "twisted.internet.reactor" in sys.modules:
        raise SystemExit("zygote: preloading installed a reactor; nodes must choose their own")


def _try(load: Any, name: str) -> None:
    """Best effort: a module that fails here is imported, and fails, in the node itself."""
    with contextlib.suppress(Exception):  # the node imports it again, and logs why it fails
        load(name)


def _dotted_paths(value: object) -> list[str]:
    if isinstance(value, dict):
        return [path for pair in value.items() for part in pair for path in _dotted_paths(part)]
    return [value] if isinstance(value, str) and value.startswith("scrapy.") else []


def serve(listener: socket.socket) -> dict[str, Any]:
    """Fork a handler per connection until stdin closes; return only in a node process."""
    handlers: set[int] = set()
    while True:
        ready, _, _ = select.select([listener, sys.stdin.fileno()], [], [], 1.0)
        _reap(handlers)
        if sys.stdin.fileno() in ready and not os.read(sys.stdin.fileno(), 64):
            stop_at = time.monotonic() + STOP_GRACE_S
            while handlers and time.monotonic() < stop_at:
                time.sleep(0.05)
                _reap(handlers)
            raise SystemExit(0)
        if listener in ready:
            connection, _ = listener.accept()
            handler = os.fork()
            if handler == 0:
                listener.close()
                return handle(connection)
            handlers.add(handler)
            connection.close()


def _reap(handlers: set[int]) -> None:
    """Wait for the handlers that ended (their CPU time then counts as this process's)."""
    for pid in list(handlers):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            handlers.discard(pid)


def handle(connection: socket.socket) -> dict[str, Any]:
    """In a handler: read the request, fork the node, report its pid and then its exit."""
    with connection.makefile("rb") as lines:
        request: dict[str, Any] = json.loads(lines.readline())
    node = os.fork()
    if node == 0:
        request["connection"] = connection
        return request
    try:  # whatever happens, a handler never runs on as a zygote
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the node, as it would
        connection.sendall(b"pid %d\n" % node)
        _, status = os.waitpid(node, 0)
        connection.sendall(b"exit %d\n" % status)
    finally:
        os._exit(0)


def become_node(request: dict[str, Any]) -> None:
    """Turn this forked process into ``python -m scrapy crawl ...`` and run it."""
    request.pop("connection").close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [os.getcwd(), *extra, *BASE_PATH]
    importlib.invalidate_caches()
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT, 0o666)  # the client emptied it
    for source, target in ((null, 0), (log, 1), (log, 2)):
        os.dup2(source, target)
    os.closerange(3, _max_fd())
    import scrapy

    sys.argv = [os.path.join(os.path.dirname(scrapy.__file__), "__main__.py"), *request["argv"]]
    from scrapy.cmdline import execute

    execute()


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 1024


def main(socket_path: str) -> None:
    preload()
    # Every node forked would otherwise copy, page by page, the preloaded objects its garbage
    # collector walks (and its exit frees): frozen, they are never collected, as objects that
    # live as long as the process are not.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    roots = sorted({name.partition(".")[0] for name in sys.modules})
    print("READY", json.dumps(roots), flush=True)
    become_node(serve(listener))


if __name__ == "__main__":
    main(sys.argv[1])
