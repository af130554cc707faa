"""The HTTP API's tokens and its audit list in Redis (``clustersync token``, ``clustersync
serve``).

A token is a name, a role and a secret. Redis keeps only the SHA-256 of the secret (the secret
is random, 256 bits, so a plain hash is enough: nothing to guess), under the cluster key
``keys.api_tokens_key()``; the secret itself is printed once, when the token is made. Every
write the API makes is recorded, with who made it, in the bounded list
``keys.api_audit_key()``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import redis

from .errors import translate_errors
from .keys import api_audit_key, api_tokens_key
from .records import as_text, json_objects

#: the roles, each allowed what the ones before it are
ROLES = ("read", "operator", "admin")
#: what a secret starts with, so that one is recognised in a file or a log
SECRET_PREFIX = "csk_"
#: audit records kept, newest
AUDIT_KEEP = 1000


def role_rank(role: str) -> int:
    """0 for read, 1 for operator, 2 for admin; ValueError for any other name."""
    return ROLES.index(role)


def secret_digest(secret: str) -> str:
    """The hex SHA-256 Redis keeps of ``secret``."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Token:
    """A token as Redis keeps it: its name, role, when it was made and by whom (never the
    secret)."""

    name: str
    role: str
    digest: str
    created_ms: int
    by: str

    def to_dict(self) -> dict[str, Any]:
        """The token as ``token list --json`` prints it (no digest)."""
        return {"name": self.name, "role": self.role, "created_ms": self.created_ms,
                "by": self.by}

    @classmethod
    def parse(cls, name: Any, raw: Any) -> Token | None:
        """From a field of the tokens hash; None if it is not a record this module wrote."""
        try:
            record = json.loads(raw)
            token = cls(as_text(name), str(record["role"]), str(record["sha256"]),
                        int(record.get("created_ms", 0)), str(record.get("by", "")))
        except (ValueError, KeyError, TypeError):
            return None
        return token if token.role in ROLES else None


class TokenStore:
    """The tokens of the HTTP API and its audit list (see the module doc)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def add(self, name: str, role: str, by: str) -> str | None:
        """Make token ``name`` with ``role``; its secret, or None if ``name`` exists already
        (nothing changed then). ValueError for an unknown role."""
        role_rank(role)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        record = json.dumps({"role": role, "sha256": secret_digest(secret),
                             "created_ms": int(time.time() * 1000), "by": by})
        with translate_errors(self.client):
            made = self.client.hsetnx(api_tokens_key(), name, record)
        return secret if made else None

    def revoke(self, name: str) -> bool:
        """Delete token ``name``; False if there was none."""
        with translate_errors(self.client):
            return bool(self.client.hdel(api_tokens_key(), name))

    def tokens(self) -> list[Token]:
        """Every token, by name (records another program wrote are left out)."""
        with translate_errors(self.client):
            raw = self.client.hgetall(api_tokens_key())
        parsed = (Token.parse(name, value) for name, value in raw.items())
        return sorted((t for t in parsed if t is not None), key=lambda t: t.name)

    def holder(self, secret: str, tokens: list[Token]) -> Token | None:
        """The token of ``tokens`` whose secret is ``secret`` (compared in constant time)."""
        digest = secret_digest(secret)
        found = None
        for token in tokens:
            if hmac.compare_digest(token.digest, digest):
                found = token
        return found

    def record(self, who: str, action: str, job: str | None, detail: Any = None) -> None:
        """Add a write to the audit list (one MULTI: LPUSH and LTRIM), with Redis's time."""
        with translate_errors(self.client):
            seconds, micros = self.client.time()
            entry = json.dumps({"ms": int(seconds) * 1000 + int(micros) // 1000, "who": who,
                                "action": action, "job": job, "detail": detail},
                               sort_keys=True, default=str)
            pipe = self.client.pipeline(transaction=True)
            pipe.lpush(api_audit_key(), entry)
            pipe.ltrim(api_audit_key(), 0, AUDIT_KEEP - 1)
            pipe.execute()

    def audit(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` audit records, newest first."""
        with translate_errors(self.client):
            raw = self.client.lrange(api_audit_key(), 0, max(1, limit) - 1)
        return json_objects(raw)
