"""The alerts of ``clustersync serve`` in Redis: which fire now, and the newest transitions.

Each transition is claimed with one atomic command, so that several serve processes behind a
load balancer, each evaluating the same rules on the same Redis, send it once between them:
firing is ``HSETNX`` of the alert's id in ``keys.api_alerts_key()`` (only the first process
to see the alert firing makes the field), resolving is ``HDEL`` of it (only the first to see
it resolved removes it). The process that claimed a transition records it in the bounded
list ``keys.api_alert_log_key()`` and sends it to the webhook.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from .errors import translate_errors
from .keys import api_alert_log_key, api_alerts_key

#: transitions kept in the log, newest
ALERT_LOG_KEEP = 200


def server_ms(client: redis.Redis) -> int:
    """Redis's clock, in ms (the time every serve process agrees on)."""
    with translate_errors(client):
        seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


class AlertStateStore:
    """The firing alerts and the transition log (see the module doc)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def claim_firing(self, alert_id: str, record: dict[str, Any]) -> bool:
        """Record ``alert_id`` as firing with ``record``; True if this call made it so (the
        caller sends the firing), False if it fires already (another process sent it)."""
        with translate_errors(self.client):
            return bool(self.client.hsetnx(api_alerts_key(), alert_id,
                                           json.dumps(record, sort_keys=True, default=str)))

    def claim_resolved(self, alert_id: str) -> dict[str, Any] | None:
        """Remove ``alert_id`` from the firing alerts: its record if this call removed it (the
        caller sends the resolving), None if it was not firing (or another process took it)."""
        with translate_errors(self.client):
            pipe = self.client.pipeline(transaction=True)
            pipe.hget(api_alerts_key(), alert_id)
            pipe.hdel(api_alerts_key(), alert_id)
            raw, removed = pipe.execute()
        if not removed:
            return None
        return _record(raw) or {}

    def firing(self) -> dict[str, dict[str, Any]]:
        """Every alert firing now: id -> record (records another program wrote are left
        out)."""
        with translate_errors(self.client):
            raw = self.client.hgetall(api_alerts_key())
        found = {_text(key): _record(value) for key, value in raw.items()}
        return {key: value for key, value in found.items() if value is not None}

    def log(self, transition: dict[str, Any]) -> None:
        """Add a transition to the log (one MULTI: LPUSH and LTRIM)."""
        with translate_errors(self.client):
            pipe = self.client.pipeline(transaction=True)
            pipe.lpush(api_alert_log_key(), json.dumps(transition, sort_keys=True, default=str))
            pipe.ltrim(api_alert_log_key(), 0, ALERT_LOG_KEEP - 1)
            pipe.execute()

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` transitions, newest first."""
        with translate_errors(self.client):
            raw = self.client.lrange(api_alert_log_key(), 0, max(0, limit - 1))
        return [record for record in map(_record, raw) if record is not None]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _record(raw: Any) -> dict[str, Any] | None:
    try:
        found = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return found if isinstance(found, dict) else None
