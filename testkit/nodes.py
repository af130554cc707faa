"""Real ``scrapy crawl`` nodes as child processes, started alike by the tests, demo and bench."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

__all__ = ["NodeProcess", "crawl_arguments", "node_environment", "start_node", "wait_or_kill"]


class NodeProcess(Protocol):
    """What a caller uses of a running node: `subprocess.Popen` has it, and so has a node
    forked by `testkit.forked.Zygote` (``returncode`` is ``-N`` after signal N, as Popen's)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def start_node(
    spider: str,
    *,
    cwd: Path,
    log_path: Path,
    spider_args: Mapping[str, str] | None = None,
    settings: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    pythonpath: Sequence[Path] = (),
    python: Path | None = None,
    options: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start ``python -m scrapy crawl SPIDER`` in ``cwd`` and return the running process.

    ``cwd`` is a Scrapy project directory (its ``scrapy.cfg`` names the settings), or any
    directory when ``env`` names the settings with ``SCRAPY_SETTINGS_MODULE``; the node's
    relative paths, such as its default spool, are under it. ``spider_args`` are passed with
    ``-a`` and ``settings`` with ``-s`` (so they win over the project's). The node gets this
    process's environment updated with ``env``, and ``pythonpath`` ahead of any ``PYTHONPATH``
    it would inherit. Its stdout and stderr go to ``log_path`` (its directory is created); it
    reads no stdin. ``python`` runs it instead of this interpreter (another virtualenv, e.g. an
    older version of the package for an A/B bench). ``options`` go on the command line as they
    are (``-o items.jsonl``). Waiting for it, or killing it, is the caller's job.
    """
    command = [str(python or sys.executable), "-m", "scrapy",
               *crawl_arguments(spider, spider_args, settings)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=node_environment(env, pythonpath),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def crawl_arguments(spider: str, spider_args: Mapping[str, str] | None,
                    settings: Mapping[str, str] | None,
                    options: Sequence[str] = ()) -> list[str]:
    """``crawl SPIDER -a K=V ... -s K=V ... OPTIONS``: the arguments after ``python -m scrapy``."""
    arguments = ["crawl", spider]
    for key, value in (spider_args or {}).items():
        arguments += ["-a", f"{key}={value}"]
    for key, value in (settings or {}).items():
        arguments += ["-s", f"{key}={value}"]
    return [*arguments, *options]


def node_environment(env: Mapping[str, str] | None, pythonpath: Sequence[Path]) -> dict[str, str]:
    """This process's environment updated with ``env``, ``pythonpath`` ahead of its PYTHONPATH."""
    node_env = {**os.environ, **(env or {})}
    if pythonpath:
        inherited = [node_env["PYTHONPATH"]] if node_env.get("PYTHONPATH") else []
        node_env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *inherited])
    return node_env


def wait_or_kill(node: NodeProcess, timeout_s: float) -> int:
    """Wait for ``node`` to exit; one still running after ``timeout_s`` (or whose wait
    fails otherwise) is killed and reaped before the error goes on."""
    try:
        return node.wait(timeout=timeout_s)
    except Exception:
        node.kill()
        node.wait()
        raise
