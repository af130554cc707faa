"""Who makes a request, and whether their role allows it.

Tokens (store/api_tokens.py) have a role each: read (every GET), operator (also pause, resume,
stop, seed, check with repair, requeue dead letters), admin (also shared settings and
restart). While no token exists and serve listens on a loopback address, a request without a
token is "local", allowed everything; once a token exists, or beyond loopback, every request
needs ``Authorization: Bearer <secret>``: none or an unknown one is 401, a role too low 403.
A request without a token that a web page of another site may have sent (its Host or Origin
says so) is 403: no page elsewhere can steer the cluster through a browser on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from ..store.api_tokens import role_rank
from .api_context import ApiContext, is_loopback
from .api_errors import ApiError

#: who a request without a token is, while none is needed
LOCAL = "local"


@dataclass(frozen=True)
class Caller:
    """Who made a request: the token's name (or "local") and its role."""

    name: str
    role: str

    def may(self, role: str) -> bool:
        return role_rank(self.role) >= role_rank(role)

    def require(self, role: str, what: str) -> None:
        """ApiError 403 unless this caller's role is ``role`` or above."""
        if not self.may(role):
            raise ApiError(403, f"token {self.name!r} has role {self.role!r}; {what} needs "
                                f"role {role!r} or above")

    @property
    def who(self) -> str:
        """How a shared settings change made by this caller is recorded in the history."""
        return f"api:{self.name}"


def api_of(request: Request) -> ApiContext:
    api: ApiContext = request.app.state.api
    return api


def caller_of(request: Request) -> Caller:
    """The caller of ``request`` (one read of the tokens); ApiError 401 if a token is needed
    and none, or none known, is given."""
    api = api_of(request)
    tokens = api.tokens.tokens()
    header = request.headers.get("authorization")
    if header is None:
        if not tokens and api.loopback:
            refuse_other_sites(request)
            return Caller(LOCAL, "admin")
        raise ApiError(401, "this server needs a token: send `Authorization: Bearer <secret>` "
                            "(`clustersync token add NAME --role read` makes one)")
    scheme, _, secret = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise ApiError(401, "the Authorization header must be `Bearer <secret>`")
    token = api.tokens.holder(secret.strip(), tokens)
    if token is None:
        raise ApiError(401, "the token given is not known here (revoked, or of another "
                            "Redis?); `clustersync token list` lists the tokens")
    return Caller(token.name, token.role)


def refuse_other_sites(request: Request) -> None:
    """ApiError 403 for a request without a token that a web page of another site may have
    made from a browser on this machine: one whose ``Host`` is no loopback name (a DNS name
    rebound to 127.0.0.1) or whose ``Origin`` is not serve itself. A browser sends both
    headers as they are; curl and scripts send no ``Origin``."""
    host = urlsplit(f"//{request.headers.get('host', '')}").hostname or ""
    origin = request.headers.get("origin")
    if not is_loopback(host) or (origin is not None and urlsplit(origin).netloc
                                 != request.headers.get("host")):
        raise ApiError(403, "a request without a token must come from this machine and this "
                            "page: Host must be a loopback address and Origin, if sent, serve "
                            "itself (`clustersync token add` to use serve from elsewhere)")


def need(role: str) -> Callable[[Request], Caller]:
    """A dependency that answers the caller of a request if their role is ``role`` or above
    (401 or 403 otherwise)."""
    def check(request: Request) -> Caller:
        caller = caller_of(request)
        caller.require(role, f"{request.method} {request.url.path}")
        return caller

    return check
