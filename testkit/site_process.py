"""The test site served from a child process: `SiteProcess`.

For the bench: it runs the delaying `TcpProxy` and its MONITOR command counter as threads of
its own process, and a site served there as well would compete with them for the GIL and skew
the timings.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode, urlsplit

from .site import AGENT_HITS_PATH, HITS_PATH, NOT_FOUND_PATH, AgentHits, TestSite

__all__ = ["SiteProcess"]

_KIT_ROOT = Path(__file__).resolve().parents[1]  # put on the child's PYTHONPATH
_STOP_TIMEOUT_S = 10.0
_QUERY_TIMEOUT_S = 30.0


class SiteProcess(TestSite):
    """A `TestSite` served by ``python -m testkit.site`` in a child process.

    Built with the same arguments, it has the same pages and URLs; its counters are the
    child's, read over HTTP (`reset_hits` is not offered). The child ends when `stop` closes
    its stdin, or when this process dies.
    """

    _process: subprocess.Popen[str] | None = None

    def command_line(self) -> list[str]:
        """The exact argv of the child process."""
        return [
            sys.executable, "-m", "testkit.site", "--pages", str(self.pages),
            "--links", str(self.links_per_page), "--seed", str(self.seed), "--host", self.host,
            "--port", str(self._requested_port), "--delay", repr(self.delay_s),
            "--until-stdin-closes",
        ]

    def start(self) -> SiteProcess:
        """Start the child and return self once it listens (every page already rendered)."""
        if self._process is not None:
            raise RuntimeError("SiteProcess already started")
        pythonpath = [str(_KIT_ROOT), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, pythonpath))}
        self._process = subprocess.Popen(
            self.command_line(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        line = _stdout(self._process).readline().strip()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"site process did not start: {line!r}")
        self.port = int(urlsplit(line.split(" ", 1)[1]).port or 0)
        return self

    def stop(self) -> None:
        """Close the child's stdin, which ends it, and reap it (SIGKILL after 10 s). Idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            _stdin(process).close()
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _stdout(process).close()

    # -- the child's counters ---------------------------------------------------------------

    def hits_by_agent(self) -> dict[str, dict[str, int]]:
        reply: dict[str, dict[str, int]] = self._ask(HITS_PATH)
        return reply

    def agent_hits(self, agent: str) -> AgentHits:
        return AgentHits(**self._ask(f"{AGENT_HITS_PATH}?{urlencode({'agent': agent})}"))

    def not_found(self) -> dict[str, int]:
        reply: dict[str, int] = self._ask(NOT_FOUND_PATH)
        return reply

    def reset_hits(self) -> None:
        raise NotImplementedError("a SiteProcess keeps its counts: start another one instead")

    def _ask(self, target: str) -> Any:
        """GET ``target`` (a path and query) from the child and decode its JSON answer."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=_QUERY_TIMEOUT_S)
        try:
            connection.request("GET", target)
            return json.loads(connection.getresponse().read())
        finally:
            connection.close()


def _stdin(process: subprocess.Popen[str]) -> IO[str]:
    assert process.stdin is not None
    return process.stdin


def _stdout(process: subprocess.Popen[str]) -> IO[str]:
    assert process.stdout is not None
    return process.stdout
