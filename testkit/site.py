"""A deterministic local website to crawl in tests, demos and benchmarks.

`TestSite(pages=N)` serves `/page/0.html` .. `/page/N-1.html` on 127.0.0.1. Page ``i`` links to
page ``i+1`` (so every page is reachable from page 0) plus pseudo-random other pages chosen by
`random.Random` seeded from ``seed`` and ``i``, so the same arguments always give the same site.
Every GET of a page is counted, per path and per User-Agent, and timed, so a test can assert
that each page was fetched exactly once across a whole cluster of crawler processes, and the
bench can time a crawl by the site's clock.

`TestSite.start()` serves from a thread of the calling process.
`testkit.site_process.SiteProcess` serves the same site from a child process, so that serving
pages never competes with the caller's threads for a GIL; it runs::

    python -m testkit.site --pages 3000 [--port P] [--links L] [--seed S] [--delay S]
                           [--until-stdin-closes]

which renders every page, prints ``READY http://127.0.0.1:PORT`` once listening and serves until
SIGTERM/SIGINT (or, with ``--until-stdin-closes``, until its stdin closes too). From another
process, ``GET /__hits`` returns the per-User-Agent counters as JSON and
``GET /__agent_hits?agent=UA`` what `TestSite.agent_hits` returns for one User-Agent.

Besides the page graph the site serves the pages of `testkit.shapes` (a tree of known depth,
listings of hundreds of items, redirects, a page that fails once), and it keeps, per User-Agent,
every GET it answered, in order (`TestSite.requests_of`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import random
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from types import FrameType
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from . import shapes
from ._service import Service, serve_in_thread

__all__ = ["AgentHits", "TestSite", "main"]

HITS_PATH = "/__hits"
AGENT_HITS_PATH = "/__agent_hits"
NOT_FOUND_PATH = "/__not_found"
_PAGE_PATH_RE = re.compile(r"^/page/(0|[1-9][0-9]*)\.html$")
_PAGE_CACHE_SIZE = 65536


@dataclass(frozen=True)
class AgentHits:
    """What the site saw of one User-Agent: fetches per path, and the time of every page hit."""

    hits: dict[str, int]
    times: list[float]  # time.monotonic() of each page hit, sorted (system-wide on Linux)

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


class TestSite(Service):
    """A threaded HTTP/1.1 server of generated, interlinked HTML pages with hit counters.

    Counters are thread-safe. ``delay_s`` is slept in the serving thread before each page
    answer; connections are served by separate threads, so a delay slows each request down
    without serializing concurrent ones.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        pages: int,
        links_per_page: int = 8,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        delay_s: float = 0.0,
    ) -> None:
        if pages < 1:
            raise ValueError(f"pages must be >= 1, got {pages}")
        if links_per_page < 1:
            raise ValueError(f"links_per_page must be >= 1, got {links_per_page}")
        self.pages = pages
        self.links_per_page = links_per_page
        self.seed = seed
        self.host = host
        self.delay_s = delay_s
        self._requested_port = port
        self.port = port
        self._lock = threading.Lock()
        self._hits: defaultdict[str, Counter[str]] = defaultdict(Counter)  # agent -> path -> n
        self._hit_times: defaultdict[str, list[float]] = defaultdict(list)  # agent -> times
        self._not_found: Counter[str] = Counter()
        self._requests: defaultdict[str, list[str]] = defaultdict(list)  # agent -> targets
        #: (time.monotonic(), headers) of every GET, in the order they arrived
        self._headers: list[tuple[float, dict[str, str]]] = []
        self._server: _SiteHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.page_body = functools.lru_cache(maxsize=_PAGE_CACHE_SIZE)(self._render_page)

    # -- content ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, ``http://HOST:PORT`` (the port is known once started when it was 0)."""
        return f"http://{self.host}:{self.port}"

    @property
    def start_url(self) -> str:
        """URL of page 0, from which every page is reachable."""
        return self.page_url(0)

    def page_path(self, i: int) -> str:
        """Path of page ``i``, e.g. ``/page/17.html``."""
        return f"/page/{i}.html"

    def page_url(self, i: int) -> str:
        """Absolute URL of page ``i``."""
        return self.url + self.page_path(i)

    def page_paths(self) -> list[str]:
        """Every page path of the site, in page order; all are reachable from page 0."""
        return [self.page_path(i) for i in range(self.pages)]

    def page_urls(self) -> list[str]:
        """Every page URL of the site, in page order."""
        return [self.page_url(i) for i in range(self.pages)]

    def links_of(self, i: int) -> list[int]:
        """Page numbers page ``i`` links to, in document order (may repeat; first is i+1)."""
        rng = random.Random(self.seed * 1_000_003 + i)
        targets = [(i + 1) % self.pages]
        targets.extend(rng.randrange(self.pages) for _ in range(self.links_per_page - 1))
        return targets

    def _render_page(self, i: int) -> bytes:
        links = "".join(
            f'<li><a href="{self.page_path(j)}">page {j}</a></li>' for j in self.links_of(i)
        )
        return (
            f"<!DOCTYPE html><html><head><title>Page {i}</title></head>"
            f"<body><h1>Page {i}</h1><ul>{links}</ul></body></html>"
        ).encode()

    def render_pages(self) -> None:
        """Render every page now (as many as the page cache holds), not while being crawled."""
        for i in range(min(self.pages, _PAGE_CACHE_SIZE)):
            self.page_body(i)

    def page_number(self, path: str) -> int | None:
        """The page number a request path names, or None if it is not a page of this site."""
        match = _PAGE_PATH_RE.match(path)
        if match is None:
            return None
        i = int(match.group(1))
        return i if i < self.pages else None

    # -- counters ---------------------------------------------------------------------------

    def record_hit(self, path: str, agent: str) -> None:
        """Count one served GET of page ``path`` by User-Agent ``agent``, timed now."""
        now = time.monotonic()
        with self._lock:
            self._hits[agent][path] += 1
            self._hit_times[agent].append(now)

    def record_request(self, target: str, agent: str) -> None:
        """Log one GET of ``target`` (path and query) by ``agent``, whatever its answer."""
        with self._lock:
            self._requests[agent].append(target)

    def record_headers(self, headers: Mapping[str, str]) -> None:
        """Log the headers of one GET (names as sent), timed now."""
        now = time.monotonic()
        with self._lock:
            self._headers.append((now, dict(headers)))

    def headers_seen(self, since: float = 0.0) -> list[dict[str, str]]:
        """The headers of every GET that arrived after ``since`` (time.monotonic()), in order."""
        with self._lock:
            return [headers for at, headers in self._headers if at > since]

    def requests_of(self, agent: str) -> list[str]:
        """Every GET target (path and ``?query``) ``agent`` sent, in the order they arrived,
        pages, other shapes and 404s alike."""
        with self._lock:
            return list(self._requests.get(agent, []))

    def times_requested(self, agent: str, target: str) -> int:
        """How many GETs of ``target`` by ``agent`` arrived so far (this one included)."""
        with self._lock:
            return self._requests.get(agent, []).count(target)

    def record_not_found(self, path: str) -> None:
        """Count one request for a path that is not a page."""
        with self._lock:
            self._not_found[path] += 1

    def hits(self) -> dict[str, int]:
        """Path -> number of GETs served for that page, summed over all User-Agents."""
        total: Counter[str] = Counter()
        for per_path in self.hits_by_agent().values():
            total.update(per_path)
        return dict(total)

    def hits_by_agent(self) -> dict[str, dict[str, int]]:
        """User-Agent -> {path: number of GETs}; a missing User-Agent header counts as ``""``."""
        with self._lock:
            return {agent: dict(per_path) for agent, per_path in self._hits.items()}

    def agent_hits(self, agent: str) -> AgentHits:
        """The page GETs of User-Agent ``agent`` so far, per path, and the time of each."""
        with self._lock:
            hits = dict(self._hits.get(agent, {}))
            times = sorted(self._hit_times.get(agent, []))
        return AgentHits(hits, times)

    def not_found(self) -> dict[str, int]:
        """Path -> number of requests answered 404 (these are not page hits)."""
        with self._lock:
            return dict(self._not_found)

    def reset_hits(self) -> None:
        """Forget all page hits, their times and 404 counts."""
        with self._lock:
            self._hits.clear()
            self._hit_times.clear()
            self._not_found.clear()
            self._requests.clear()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> TestSite:
        """Start serving in a background daemon thread; returns self once listening."""
        if self._server is not None:
            raise RuntimeError("TestSite already started")
        server = _SiteHTTPServer((self.host, self._requested_port), _PageHandler, self)
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = serve_in_thread(server, f"TestSite:{self.port}")
        return self

    def stop(self) -> None:
        """Stop listening and close every open keep-alive connection. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class _SiteHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its site and can close its live connections."""

    daemon_threads = True
    request_queue_size = 1024

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        site: TestSite,
    ) -> None:
        self.site = site
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._connections_lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a crawler killed with SIGKILL resets its connections: expected here, not an error
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Shut down every open connection so idle keep-alive threads end now."""
        with self._connections_lock:
            conns = list(self._connections)
            self._connections.clear()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _PageHandler(BaseHTTPRequestHandler):
    """Serves pages, counters and 404s with a single write per response."""

    server: _SiteHTTPServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "TestSite/1"

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, alive=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, alive=False)

    def log_message(self, format: str, *args: object) -> None:
        """Silence the default per-request stderr logging."""

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        site = self.server.site
        target = urlsplit(self.path)
        path, query = target.path, target.query
        if path in (HITS_PATH, AGENT_HITS_PATH, NOT_FOUND_PATH):
            self._answer_counters(path, query, send_body)
            return
        agent = self.headers.get("User-Agent", "")
        if send_body:
            site.record_request(self.path, agent)
            site.record_headers(dict(self.headers.items()))
        page = site.page_number(path)
        if page is not None:
            if site.delay_s > 0:
                time.sleep(site.delay_s)
            if send_body:
                site.record_hit(path, agent)
            self._send(200, "text/html; charset=utf-8", site.page_body(page), send_body)
        elif (shape := shapes.answer(site, path, agent)) is not None:
            self._send(shape.status, "text/html; charset=utf-8", shape.body, send_body,
                       shape.location)
        else:
            site.record_not_found(path)
            self._send(404, "text/plain; charset=utf-8", b"not found\n", send_body)

    def _answer_counters(self, path: str, query: str, send_body: bool) -> None:
        site = self.server.site
        if path == HITS_PATH:
            body = _json(site.hits_by_agent())
        elif path == AGENT_HITS_PATH:
            agent = parse_qs(query, keep_blank_values=True).get("agent", [""])[0]
            body = _json(asdict(site.agent_hits(agent)))
        else:
            body = _json(site.not_found())
        self._send(200, "application/json", body, send_body)

    def _send(self, status: int, content_type: str, body: bytes, send_body: bool,
              location: str | None = None) -> None:
        connection = "close" if self.close_connection else "keep-alive"
        moved = f"Location: {location}\r\n" if location else ""
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
            f"{moved}Content-Length: {len(body)}\r\nConnection: {connection}\r\n\r\n"
        ).encode("latin-1")
        self.wfile.write(head + body if send_body else head)


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve a deterministic test website.")
    parser.add_argument("--pages", type=int, required=True, help="number of pages")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--links", type=int, default=8, help="links per page")
    parser.add_argument("--seed", type=int, default=0, help="seed of the link layout")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds slept per page")
    parser.add_argument("--until-stdin-closes", action="store_true",
                        help="also stop when stdin closes (the parent stopped or died)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: serve until SIGTERM or SIGINT, printing ``READY URL`` once listening."""
    args = _parse_args(argv)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.until_stdin_closes:
        threading.Thread(target=_set_at_eof, args=(sys.stdin, stop), daemon=True).start()
    site = TestSite(
        args.pages,
        links_per_page=args.links,
        seed=args.seed,
        host=args.host,
        port=args.port,
        delay_s=args.delay,
    )
    site.render_pages()
    with site:
        print(f"READY {site.url}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


def _set_at_eof(stream: IO[str], event: threading.Event) -> None:
    for _ in stream:
        pass
    event.set()


if __name__ == "__main__":
    sys.exit(main())
