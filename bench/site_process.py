"""Runs `site_server.py` in a child process and asks it for each run's hits and times."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

SITE_SERVER = Path(__file__).resolve().parent / "site_server.py"
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class AgentHits:
    """What the site saw of one User-Agent: fetches per path, and the time of every page hit."""

    hits: dict[str, int]
    times: list[float]  # time.monotonic() of each page hit, sorted

    @property
    def first(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def last(self) -> float | None:
        return self.times[-1] if self.times else None

    @property
    def span_s(self) -> float:
        """Seconds from the first page fetched to the last (0 with fewer than two fetches)."""
        return self.times[-1] - self.times[0] if self.times else 0.0

    @property
    def longest_pause_s(self) -> float:
        """The longest time between two consecutive page hits: a stall, if there was one."""
        return max((b - a for a, b in pairwise(self.times)), default=0.0)


class SiteProcess:
    """The site, served by a child process so that it never shares a GIL with a crawler."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    @property
    def start_url(self) -> str:
        return f"{self.url}/page/0.html"

    def start(self) -> SiteProcess:
        process = subprocess.Popen(
            [sys.executable, str(SITE_SERVER), "--pages", str(self.pages)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self._process = process
        line = _stdout(process).readline().strip()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"site server did not start: {line!r}")
        self.url = line.split(" ", 1)[1]
        return self

    def hits_of(self, agent: str) -> AgentHits:
        """Fetches of ``agent`` so far (``agent`` must not contain a newline)."""
        reply = self._ask(f"STATS {agent}")
        return AgentHits(dict(reply["hits"]), list(reply["times"]))

    def _ask(self, command: str) -> dict[str, Any]:
        process = self._process
        if process is None or process.stdin is None:
            raise RuntimeError("site server is not running")
        process.stdin.write(command + "\n")
        process.stdin.flush()
        reply: dict[str, Any] = json.loads(_stdout(process).readline())
        return reply

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the server ends when its stdin closes
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> SiteProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _stdout(process: subprocess.Popen[str]) -> IO[str]:
    assert process.stdout is not None
    return process.stdout
