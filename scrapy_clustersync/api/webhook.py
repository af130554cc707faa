"""Sending alert transitions to a webhook: each one a ``POST`` of its JSON body, from a thread of
its own (a slow receiver never delays the evaluation), retried with backoff.

A body is sent once the transition was claimed (store/alert_state.py); if every try fails it is
logged and dropped (the transition stays in the log, ``GET /api/alerts``).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
#: tries of one body, and the wait before the second (doubled before each next)
TRIES = 4
FIRST_BACKOFF_S = 0.5
TIMEOUT_S = 5.0
#: bodies waiting at most; more are dropped (and logged) while the receiver is away
QUEUE_MAX = 1000


def post_json(url: str, body: dict[str, Any]) -> None:
    """One POST of ``body``; an exception unless the answer is 2xx."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "clustersync-serve"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 (http(s) only)
        if not 200 <= answer.status < 300:
            raise urllib.error.HTTPError(url, answer.status, "not 2xx", answer.headers, None)


class Webhook:
    """A queue of bodies for one URL and the daemon thread posting them, in order."""

    def __init__(self, url: str, post: Callable[[str, dict[str, Any]], None] = post_json,
                 first_backoff_s: float = FIRST_BACKOFF_S) -> None:
        self.url, self.post, self.first_backoff_s = url, post, first_backoff_s
        self.waiting: queue.Queue[dict[str, Any]] = queue.Queue(QUEUE_MAX)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="clustersync-webhook",
                                        daemon=True)
        self._thread.start()

    def send(self, body: dict[str, Any]) -> None:
        """Queue ``body`` (never blocks)."""
        try:
            self.waiting.put_nowait(body)
        except queue.Full:
            log.error("clustersync alerts: %d bodies wait for the webhook; dropped %s %s",
                      QUEUE_MAX, body.get("state"), body.get("rule"))

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                body = self.waiting.get(timeout=0.5)
            except queue.Empty:
                continue
            self.deliver(body)

    def deliver(self, body: dict[str, Any]) -> bool:
        """Post ``body``, TRIES times at most; True once the receiver took it."""
        wait_s = self.first_backoff_s
        for attempt in range(1, TRIES + 1):
            try:
                self.post(self.url, body)
                return True
            except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
                if attempt == TRIES:
                    log.error("clustersync alerts: the webhook refused %s %s %d times, last: "
                              "%s", body.get("state"), body.get("rule"), TRIES, exc)
                    return False
                if self._stop.wait(wait_s):
                    return False
                wait_s *= 2
        return False
