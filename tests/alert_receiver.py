"""A webhook receiver for the alert tests: a tiny HTTP server on 127.0.0.1 keeping every JSON
body posted to it, in order."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class AlertReceiver:
    """Collects the bodies POSTed to ``url``; answers 503 to the first ``refuse`` posts (to
    make the sender retry)."""

    def __init__(self, refuse: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.posts = 0
        self.refuse = refuse
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.posts += 1
                    refused = receiver.posts <= receiver.refuse
                    if not refused:
                        receiver.bodies.append(json.loads(data))
                self.send_response(503 if refused else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def of(self, rule: str) -> list[tuple[str, str | None, str]]:
        """(state, node, job) of each body of ``rule``, in the order received."""
        with self.lock:
            return [(b["state"], b["node"], b["job"]) for b in self.bodies if b["rule"] == rule]

    def __enter__(self) -> AlertReceiver:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
