"""Run the `clustersync` command in this process, with click's CliRunner: what a test of the
CLI needs from a `clustersync` process, without the second or so an interpreter takes to start.

    from cli_runner import run_cli
    status = run_cli(redis_server.url, "status", "shop", "--json")
    assert status.returncode == 0, status.stderr

The result has the fields of ``subprocess.CompletedProcess`` a test reads (``returncode``,
``stdout``, ``stderr``), so a helper that ran ``python -m scrapy_clustersync.cli`` can switch to
it unchanged. Only the entry points themselves need a real process (tests/test_cli.py).

One run at a time: CliRunner swaps ``sys.stdin``/``stdout``/``stderr`` of the whole process
while a command runs, so a run from a helper thread is fine only while no other thread runs
one (or prints what the test asserts).
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from scrapy_clustersync.cli.app import main

#: variables a run reads that must come from the test, never from the shell that ran pytest
ISOLATED_ENV = ("CLUSTERSYNC_REDIS_URL", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")


@dataclass(frozen=True)
class CliRun:
    """What one run printed and its exit code. An exception the command did not turn into a
    message is in ``stderr`` as its traceback, as a process would print it."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout then stderr, for assertion messages."""
        return self.stdout + self.stderr


def run_cli(redis_url: str | None, *args: str, input: str | None = None,  # noqa: A002
            cwd: Path | None = None, env: Mapping[str, str | None] | None = None) -> CliRun:
    """``clustersync [--redis-url REDIS_URL] ARGS...`` (no flag when ``redis_url`` is None).

    ``input``: its stdin; ``cwd``: the directory it runs in (a Scrapy project there is read
    as the command reads it); ``env``: variables to set (None unsets one) on top of an
    environment without SCRAPY_SETTINGS_MODULE and any CLUSTERSYNC_* variable.
    """
    argv = (["--redis-url", redis_url] if redis_url is not None else []) + list(args)
    run_env: dict[str, str | None] = dict.fromkeys(ISOLATED_ENV)
    # the test kit's own CLUSTERSYNC_CHAOS_* variables are no settings: the command refuses them
    run_env.update(dict.fromkeys(n for n in os.environ if n.startswith("CLUSTERSYNC_")))
    run_env.update(env or {})
    with _in_directory(cwd):
        result = CliRunner().invoke(main, argv, input=input, env=run_env,
                                    prog_name="clustersync")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return CliRun(result.exit_code, result.stdout, stderr)


@contextlib.contextmanager
def _in_directory(cwd: Path | None) -> Iterator[None]:
    """Run in ``cwd`` with a fresh import of the project's packages there, as a new process
    would have: packages of those names imported before are set aside during the run, and
    afterwards what the run imported from ``cwd`` and the path Scrapy added are forgotten."""
    if cwd is None:
        yield
        return
    root = Path(cwd).resolve()
    local = {p.parent.name for p in root.glob("*/__init__.py")}
    shadowed = {name: module for name, module in sys.modules.items()
                if name.split(".")[0] in local}
    path, before = list(sys.path), os.getcwd()
    for name in shadowed:
        del sys.modules[name]
    os.chdir(root)  # contextlib.chdir is Python 3.11+
    try:
        yield
    finally:
        os.chdir(before)
        sys.path[:] = path
        for name in [n for n in sys.modules if n.split(".")[0] in local]:
            del sys.modules[name]
        sys.modules.update(shadowed)
