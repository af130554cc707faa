"""The bench's website: `TestSite` plus the time of every page hit, in its own process.

Run by `bench/run.py` as ``python bench/site_server.py --pages N``. It prints
``READY http://127.0.0.1:PORT`` once listening, then answers one command per stdin line with one
JSON line on stdout:

    STATS <user-agent>   {"hits": {path: count}, "times": [t, ...]}
                         (t = time.monotonic() of each page hit of that User-Agent, sorted;
                         CLOCK_MONOTONIC is system-wide on Linux, so the bench can compare it
                         with the times it started its crawler processes)

It serves until stdin closes, SIGTERM or SIGINT. The site runs in a process of its own so
that serving pages never competes with a crawler for a GIL.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.site import TestSite


class TimedSite(TestSite):
    """A `TestSite` that also keeps the first and last page-hit time of each User-Agent."""

    def __init__(self, pages: int, **kwargs: Any) -> None:
        super().__init__(pages, **kwargs)
        self._times: dict[str, list[float]] = {}  # agent -> every page-hit time, in order
        self._times_lock = threading.Lock()

    def record_hit(self, path: str, agent: str) -> None:
        now = time.monotonic()
        super().record_hit(path, agent)
        with self._times_lock:
            self._times.setdefault(agent, []).append(now)

    def stats_of(self, agent: str) -> dict[str, object]:
        """Hits of ``agent`` per path, and the time of each of its page hits, in order."""
        hits = self.hits_by_agent().get(agent, {})
        with self._times_lock:
            times = sorted(self._times.get(agent, []))
        return {"hits": hits, "times": times}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--links", type=int, default=8)
    return parser.parse_args(argv)


def _serve_commands(site: TimedSite) -> None:
    for line in sys.stdin:
        command, _, argument = line.rstrip("\n").partition(" ")
        if command == "STATS":
            reply: dict[str, object] = site.stats_of(argument)
        else:
            reply = {"error": f"unknown command {command!r}"}
        print(json.dumps(reply), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with TimedSite(args.pages, links_per_page=args.links, port=args.port) as site:
        for i in range(args.pages):  # render every page now, not while a run is timed
            site.page_body(i)
        print(f"READY {site.url}", flush=True)
        _serve_commands(site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
