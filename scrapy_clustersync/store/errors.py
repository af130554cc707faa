"""The store's own exceptions: the Scrapy-facing modules never see a ``redis`` exception."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from ..url_secrets import scrub
from .outage_replies import drop_connections, not_serving


class StoreError(Exception):
    """Redis answered, but not as expected (a script error, a wrong type, a refused command)."""


class StoreUnavailable(StoreError):
    """Redis cannot be used right now: connection refused or lost, timeout, or a server that
    cannot take writes for now (a replica after a failover, loading, out of memory, ...)."""


class AccessRefused(StoreError):
    """Redis refused this client: a wrong or missing password (WRONGPASS, NOAUTH) or an ACL
    user without the permission a call needs (NOPERM). Retrying never helps; the URL must change.
    """


class JobUnreadable(StoreError):
    """The job's stored state is of a kind this version does not read (made by another program
    or with a mode it does not write); a node cannot join it until the job is purged."""


class StateLost(StoreError):
    """The job's keys are gone or were replaced: Redis restarted empty or the job was purged."""


class RolledBack(StoreError):
    """Redis came back older than this node saw it: writes it confirmed to the node are gone.

    A restart from a lagging snapshot, an AOF that lost its last second, a failover to a replica
    that lagged. Nothing was changed by the call that found it; the node must forget what it
    believed stored (see ``SyncWorker``) before it writes on.
    """


class BadBatch(StoreError):
    """A batch of writes holds an op the flush script refuses, or one redis-py cannot even
    send (a value of a type it does not encode); nothing of it was applied.

    Retrying the same batch can never succeed: the caller sets the bad op aside.
    """


class ResultsFull(StoreError):
    """The job's results stream holds ``CLUSTERSYNC_RESULTS_MAX`` entries: the flush script
    refused a batch carrying results, before any change. Nothing is dropped: the node keeps the
    batch, leases no new work and tries again later (readers trim the stream as they commit).
    """


@contextmanager
def translate_errors(client: redis.Redis) -> Iterator[None]:
    """Turn redis-py exceptions into the store's own.

    A reply saying the server cannot take writes right now (a replica after a failover, out of
    memory, loading, ...) is an outage like a lost connection, and ``client`` (the one that
    made the call) drops its pooled connections, so the retry reaches whichever server its
    address leads to now.
    """
    try:
        yield
    except redis.exceptions.RedisClusterException as exc:  # not a RedisError: a cluster client's
        raise _cluster_error(exc, client_secrets(client)) from exc
    except redis.RedisError as exc:
        secrets = client_secrets(client)
        _scrub_args(exc, secrets)  # it is chained below: a traceback prints it too
        if _access_refused(exc):  # never an outage: retrying cannot help
            raise _scrubbed(AccessRefused(str(exc) or type(exc).__name__), secrets) from exc
        raise _scrubbed(_translated(exc, client), secrets) from exc


def _cluster_error(exc: Exception, secrets: list[str | bytes]) -> StoreError:
    """A cluster client's own exception: a slot no node serves now is an outage (a failover
    under way); anything else is a call the cluster cannot take."""
    _scrub_args(exc, secrets)
    text = str(exc) or type(exc).__name__
    if isinstance(exc, redis.exceptions.SlotNotCoveredError):
        return _scrubbed(StoreUnavailable(f"the Redis cluster serves no slot of this job now "
                                          f"(failover under way?): {text}"), secrets)
    return _scrubbed(StoreError(text), secrets)


def _scrubbed(error: StoreError, secrets: list[str | bytes]) -> StoreError:
    """``error`` with the client's credentials masked in its message: a redis-py message may
    quote what it was given (a host, a URL), and the message is logged and printed."""
    text = str(error)
    clean = scrub(text, secrets)
    return error if clean == text else type(error)(clean)


def _scrub_args(exc: BaseException, secrets: list[str | bytes]) -> None:
    exc.args = tuple(scrub(arg, secrets) if isinstance(arg, str) else arg for arg in exc.args)


def client_secrets(client: object) -> list[str | bytes]:
    """The credentials ``client`` (a redis-py client) connects with: its password and any
    other connection keyword that names a secret (from the URL's query too)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or getattr(
        client, "lazy_options", None) or {}
    return [value for name, value in kwargs.items()
            if isinstance(value, (str, bytes)) and _SECRET_NAME.search(name)]


#: connection keywords whose value is a credential
_SECRET_NAME = re.compile(r"pass|secret|token|cred|auth", re.IGNORECASE)


def _translated(exc: redis.RedisError, client: redis.Redis) -> StoreError:
    reason = not_serving(exc)
    if reason is not None:
        drop_connections(client)
        return StoreUnavailable(reason)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError)):
        return StoreUnavailable(tls_hint(str(exc)) or str(exc) or type(exc).__name__)
    text = str(exc)
    if isinstance(exc, redis.DataError):
        # redis-py cannot encode an argument (a bool or None priority): nothing was sent, and
        # sending the same batch again can never work, like an op the flush script refuses
        return BadBatch(f"an op holds a value that cannot be sent to Redis ({text})")
    if isinstance(exc, redis.ResponseError):
        for marker, kind in _SCRIPT_ERRORS.items():
            if marker in text:
                return kind(_WRONG_TYPE_HINT.format(text) if kind is StoreError else text)
    return StoreError(text)


def tls_hint(text: str) -> str | None:
    """A plain statement of a TLS handshake failure in ``text`` (a redis-py connection error),
    with the setting to check; None if it is not one."""
    for marker, hint in _TLS_FAILURES.items():
        if marker in text:
            detail = text.split("] ", 1)[-1].split(" (_ssl.c")[0]
            return f"TLS: {hint} ({detail})"
    return None


#: what an OpenSSL error in a connection error means, and what to check
_TLS_FAILURES = {
    "CERTIFICATE_VERIFY_FAILED": (
        "the certificate of Redis was not verified: CLUSTERSYNC_TLS_CA_CERTS (or ssl_ca_certs in "
        "the URL) must name the CA that signed it, for the host name in the URL"),
    "CERTIFICATE_REQUIRED": (
        "Redis wants a client certificate: set CLUSTERSYNC_TLS_CERTFILE and "
        "CLUSTERSYNC_TLS_KEYFILE (or ssl_certfile and ssl_keyfile in the URL)"),
    "ALERT_UNKNOWN_CA": (
        "Redis refused this client's certificate (not signed by a CA it trusts): check "
        "CLUSTERSYNC_TLS_CERTFILE and CLUSTERSYNC_TLS_KEYFILE"),
    "WRONG_VERSION_NUMBER": (
        "the server does not speak TLS on this port: use redis:// for a plain-text port, or "
        "the server's TLS port"),
}


def _access_refused(exc: redis.RedisError) -> bool:
    """``exc`` is a refusal of this client: wrong password, no password, an ACL without the
    permission (redis-py's classes, or the code inside a script's error reply)."""
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.NoPermissionError)):
        return True
    return isinstance(exc, redis.ResponseError) and bool(_ACCESS_CODES.search(str(exc)))


#: a refusal of access, also where Redis wraps it in a script's error
_ACCESS_CODES = re.compile(r"\b(?:NOPERM|WRONGPASS|NOAUTH)\b")

_WRONG_TYPE_HINT = (
    "{} - another program wrote into this job's keys: delete or rename that key (or "
    "`clustersync purge` the job); the node keeps its writes and retries"
)

#: the errors the job's scripts raise on purpose (see the headers of lua/*.lua)
_SCRIPT_ERRORS: dict[str, type[StoreError]] = {
    "CLUSTERSYNC_STATE_LOST": StateLost,
    "CLUSTERSYNC_ROLLED_BACK": RolledBack,
    "CLUSTERSYNC_BAD_OP": BadBatch,
    "CLUSTERSYNC_RESULTS_FULL": ResultsFull,
    "CLUSTERSYNC_WRONG_TYPE": StoreError,  # refused before any change; retried until mended
}
