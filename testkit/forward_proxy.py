"""A tiny HTTP forward proxy on 127.0.0.1 that records every request it forwards.

A client configured with ``http://[user:password@]127.0.0.1:PORT`` as its proxy sends it
``GET http://site/path``; the proxy records the absolute URL and the headers (Proxy-Authorization
included: ``requests``), fetches the URL itself and answers with what the site answered.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._service import Service, serve_in_thread

__all__ = ["ForwardProxy"]

#: forward straight to the site: never through a proxy of this machine's environment
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ForwardProxy(Service):
    """``url`` is the proxy's address; ``requests`` lists (absolute URL, headers) of every GET
    forwarded, in arrival order."""

    def __init__(self) -> None:
        self.port = 0
        self._lock = threading.Lock()
        self._requests: list[tuple[str, dict[str, str]]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[tuple[str, dict[str, str]]]:
        with self._lock:
            return list(self._requests)

    def record(self, url: str, headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append((url, headers))

    def start(self) -> ForwardProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.record(self.path, dict(self.headers.items()))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("proxy-authorization", "proxy-connection")}
                try:
                    with _DIRECT.open(urllib.request.Request(self.path, headers=headers),
                                      timeout=30) as answer:
                        status, body = answer.status, answer.read()
                        kind = answer.headers.get("Content-Type", "text/html")
                except urllib.error.HTTPError as error:
                    status, body, kind = error.code, error.read(), "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        serve_in_thread(self._server, "forward-proxy")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
