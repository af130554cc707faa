"""The job's control state in Redis (pause, resume, stop): the script that changes it
(``ControlScript``), the read that follows it, and the subscription that hears about a change at
once.

The state is the job's meta field ``control`` (absent means running); ``control.lua`` changes
it and publishes the new state on the job's control channel (``JobKeys.control_channel``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from .client import client_of_its_own
from .cluster_client import is_cluster
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text
from .round_trip import Answer, RoundTrip
from .script_base import JobScript

RUNNING = "running"
PAUSED = "paused"
STOPPING = "stopping"
STOPPED = "stopped"
#: every state a job's ``control`` field may hold
STATES = (RUNNING, PAUSED, STOPPING, STOPPED)
#: what ``control.lua`` accepts
ACTIONS = ("pause", "resume", "stop", "settle")
#: how settings.lua announces a new shared-settings version on the control channel
SETTINGS_MESSAGE = "settings "
#: how site_slow_down.lua tells every node a site answered 429/503: "site <blocked_ms>
#: <backoff_ms> <site>" (a site's slow-down, no control state)
SITE_MESSAGE = "site "
#: how long a subscription's reader thread waits for a message before it looks whether it
#: was closed
READ_WAIT_S = 0.5
#: the meta fields a follower reads in one HMGET
_FIELDS = ["control", "control_ms", "settings_version", "stop_reason"]


@dataclass(frozen=True)
class ControlState:
    """The job's control state and the server ms of its last change (0: never changed);
    ``settings_version``: the job's shared-settings version, read with it (0: none yet);
    ``reason``: the close reason a CLOSESPIDER_* limit stopped the job with ("": none,
    closespider.lua)."""

    state: str = RUNNING
    since_ms: int = 0
    settings_version: int = 0
    reason: str = ""

    @classmethod
    def parse(cls, state: Any, since_ms: Any, settings_version: Any = None,
              reason: Any = None) -> ControlState:
        """From the meta fields as read; a value this version does not know reads as running."""
        text = as_text(state) if state else RUNNING
        return cls(text if text in STATES else RUNNING, int(as_text(since_ms) or 0) if since_ms
                   else 0, settings_version_of(settings_version), as_text(reason) if reason else "")

    @classmethod
    def heard(cls, message: str) -> ControlState | None:
        """From a message of the control channel: "<state>" or "<state> <reason>"; None for a
        message that names no state (a new settings version: "settings <version>")."""
        state, _, reason = message.partition(" ")
        return cls(state, 0, 0, reason) if state in STATES else None


def settings_version_of(raw: Any) -> int:
    """A ``settings_version`` as read (absent or unreadable: 0)."""
    try:
        return max(0, int(as_text(raw))) if raw else 0
    except ValueError:
        return 0


def heard_settings_version(message: str) -> int | None:
    """The version a "settings <version>" message of the control channel names; None for any
    other message (a control state)."""
    if not message.startswith(SETTINGS_MESSAGE):
        return None
    return settings_version_of(message[len(SETTINGS_MESSAGE):].strip())


def heard_site_slowed(message: str) -> str | None:
    """The site a "site <blocked_ms> <backoff_ms> <site>" message of the control channel names
    (it answered 429/503 on some node); None for any other message, or one not of that form."""
    if not message.startswith(SITE_MESSAGE):
        return None
    parts = message[len(SITE_MESSAGE):].split(" ", 2)
    return parts[2] if len(parts) == 3 and parts[2] else None


@dataclass(frozen=True)
class ControlChange:
    """What ``control.lua`` did: ``verdict`` is "changed", "same", "finished", "stopping" or
    "absent" (see the script's header); ``before`` and ``after`` are states."""

    verdict: str
    before: str
    after: str
    since_ms: int


class ControlScript(JobScript):
    """control.lua: ``run`` applies an action (one of ACTIONS) and publishes the new state."""

    FILE = "control"
    KEYS = ("meta", "nodes", "queue", "deadlines")
    ARGV = ("action", "channel")

    def call(self, action: str) -> tuple[list[str], list[Any]]:
        k = self.keys
        return [k.meta, k.nodes, k.queue, k.deadlines], [action, k.control_channel]

    def run(self, action: str) -> ControlChange:
        verdict, before, after, since = self._call(*self.call(action))
        return ControlChange(as_text(verdict), as_text(before), as_text(after),
                             int(as_text(since) or 0))


class ControlStore:
    """The control state of one job: change it (``change``), read it (``read``), and hear of
    changes (``subscribe``)."""

    def __init__(self, client: redis.Redis, keys: JobKeys) -> None:
        self.client = client
        self.keys = keys
        self._script = ControlScript(client, keys)

    def change(self, action: str) -> ControlChange:
        """Run ``control.lua`` with ``action`` (one of ACTIONS); one atomic call."""
        if action not in ACTIONS:
            raise ValueError(f"unknown control action {action!r}")
        return self._script.run(action)

    def read(self) -> ControlState:
        """The state (and the shared-settings version) as Redis holds it now (one HMGET)."""
        with translate_errors(self.client):
            reply = self.client.hmget(self.keys.meta, _FIELDS)
        return ControlState.parse(*reply)

    def read_in(self, trip: RoundTrip) -> Answer[ControlState]:
        """``read`` in ``trip`` (round_trip.py)."""
        return trip.add(lambda pipe: pipe.hmget(self.keys.meta, _FIELDS),
                        Answer(self.client, lambda reply: ControlState.parse(*reply), self.read))

    def subscribe(self, on_heard: Callable[[], None] | None = None) -> ControlSubscription:
        """A subscription to the job's control channel on a connection of its own; with
        ``on_heard``, read on a thread of its own, which calls it as each message comes."""
        return ControlSubscription(self.client, self.keys.control_channel, on_heard)


class ControlSubscription:
    """The job's control channel, on its own connection; ``wait`` answers the text of a
    message (a state, "settings <version>": ``heard_settings_version``, or "site ...":
    ``heard_site_slowed``), or None when none came in time. Errors are the store's own
    (``StoreError``).

    With ``on_heard``, a reader thread of its own waits on the connection and calls it (on that
    thread) as each message comes, so that whoever waits elsewhere is woken at once (a site's
    slow-down must reach the node's reactor in milliseconds, not at its Redis thread's next
    look); ``wait`` then answers what the reader queued, and raises what stopped it."""

    def __init__(self, client: redis.Redis, channel: str,
                 on_heard: Callable[[], None] | None = None) -> None:
        # its own connection, opened here (its handshake's round trips are the caller's now)
        self.client = client = client_of_its_own(client)
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        with translate_errors(client):
            self._pubsub.subscribe(channel)
        self._heard: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._failed: Exception | None = None
        self._closed = threading.Event()
        self._reader: threading.Thread | None = None
        if on_heard is not None:
            self._reader = threading.Thread(target=self._read_on, args=(on_heard,), daemon=True,
                                            name="clustersync-control")
            self._reader.start()

    def wait(self, timeout_s: float) -> str | None:
        if self._reader is None:
            return self._read(timeout_s)
        try:
            return self._heard.get(timeout=timeout_s) if timeout_s > 0 else self._heard.get_nowait()
        except queue.Empty:
            if self._failed is not None:
                with translate_errors(self.client):
                    raise self._failed from None
            return None

    def _read(self, timeout_s: float) -> str | None:
        with translate_errors(self.client):
            message = self._pubsub.get_message(timeout=timeout_s)
        if message is None or message.get("type") != "message":
            return None
        return as_text(message["data"])

    def _read_on(self, on_heard: Callable[[], None]) -> None:
        """The reader thread: queue each message and call ``on_heard``, until closed or the
        connection fails (``wait`` raises that); it closes the connection as it ends."""
        try:
            while not self._closed.is_set():
                heard = self._read(READ_WAIT_S)
                if heard is not None:
                    self._heard.put(heard)
                    on_heard()
        except Exception as exc:  # the store's error (translated), or a bug: wait() raises it
            self._failed = exc
            on_heard()
        finally:
            self._disconnect()

    def close(self) -> None:
        """Drop the connection (with a reader, the reader does as it ends, within
        ``READ_WAIT_S``); never raises (the node may be closing because Redis is gone)."""
        self._closed.set()
        if self._reader is None:
            self._disconnect()

    def _disconnect(self) -> None:
        close: Callable[[], None] = self._pubsub.close
        # a broken connection is what may be closed here
        with contextlib.suppress(Exception):
            close()
        with contextlib.suppress(Exception):
            if is_cluster(self.client):
                self.client.close()
            else:
                self.client.connection_pool.disconnect()
