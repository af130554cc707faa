"""HttpRedis: the Redis client of a node that reaches its job through ``clustersync serve``.

A node that cannot reach Redis (``CLUSTERSYNC_URL`` instead of ``CLUSTERSYNC_REDIS_URL``) keeps
the very same ``JobStore``, script classes and round trips: only the client under them
changes. Each command, or each pipeline of a round trip (round_trip.py), is one HTTP request
to ``POST /api/v1/jobs/<job>/nodes/<node>/calls`` (api/node_calls.py), msgpack both ways, sent
over one kept-alive httpx connection. serve runs the commands in the same order in one Redis
pipeline, after checking each: a script of this package (by its text or its SHA), or a read of
one of the job's keys, every key of the job's hash tag.

Errors come back as redis-py's own, so that ``translate_errors`` makes the store's exceptions
of them exactly as for a Redis reached directly: a reply Redis gave (a script's error,
NOSCRIPT, READONLY, ...) is raised as the class of redis-py that reply parses to; serve or its
Redis out of reach (a connection refused or cut, a timeout, a 5xx) is ``redis.ConnectionError``
(StoreUnavailable: the node backs off, spools and retries with the same call ids); a token
refused (401, 403) is ``redis.AuthenticationError`` (AccessRefused).

The job's control channel is not followed over HTTP: ``pubsub`` is refused as an ACL user
without SUBSCRIBE is, and the node follows the control state by its re-reads
(node/control_follower.py).
"""

from __future__ import annotations

import hashlib
import ssl
import threading
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import quote

import msgpack
import redis
from redis.commands.core import Script

#: the media type of the node's requests and serve's replies
MSGPACK = "application/msgpack"
#: the HTTP API's version in every path of the protocol (docs/http-workers.md)
API_PREFIX = "/api/v1"


def calls_path(job: str, node_id: str) -> str:
    """The path a node sends its commands to."""
    return f"{API_PREFIX}/jobs/{quote(job, safe='')}/nodes/{quote(node_id, safe='')}/calls"


def error_of(kind: str, message: str) -> redis.RedisError:
    """The redis-py exception serve's reply names (``kind``: its class name)."""
    found = getattr(redis.exceptions, kind, None)
    if isinstance(found, type) and issubclass(found, redis.RedisError):
        return found(message)
    return redis.ResponseError(message)


class _Pool:
    """What the store reads of a redis-py connection pool: the credential to scrub from
    messages (``connection_kwargs``), and connections to open or drop (the HTTP client's)."""

    connection_class = None

    def __init__(self, connection_class: object = None, http_client: HttpRedis | None = None,
                 **connection_kwargs: Any) -> None:
        self.connection_kwargs = connection_kwargs
        self.client = http_client

    def get_encoder(self) -> Any:
        from redis._parsers.encoders import Encoder

        return Encoder("utf-8", "strict", False)  # type: ignore[no-untyped-call, unused-ignore]

    def get_protocol(self) -> int:
        return 2

    def get_connection(self, *args: Any, **kwargs: Any) -> _Pool:
        if self.client is None:  # a client of its own (a subscription): none over HTTP
            raise redis.exceptions.NoPermissionError(
                "NOPERM a node over HTTP follows the control state by re-reads")
        self.client.execute_command("PING")
        return self

    def release(self, connection: object) -> None:
        """Nothing to give back: httpx keeps its connections."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        if self.client is not None:
            self.client.drop_connections()


class HttpRedis:
    """The subset of ``redis.Redis`` the node's store uses, over serve (see the module doc)."""

    def __init__(self, url: str, token: str, job: str, node_id: str,
                 timeout_s: float = 10.0, verify: bool | str = True,
                 transport: Any = None, cert: tuple[str, str] | None = None) -> None:
        """``verify``: check serve's certificate (with this CA file, if a path); ``cert``: the
        client certificate and key files to show serve's TLS, if any; ``transport``: httpx's
        (a test's ``httpx.MockTransport``); None: HTTP itself."""
        import httpx

        self._base = url.rstrip("/")
        self._path = calls_path(job, node_id)
        self._headers = {"content-type": MSGPACK, "accept": MSGPACK}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._options: dict[str, Any] = {"timeout": timeout_s, "transport": transport,
                                         "verify": tls_context(verify, cert)}
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=self._base, **self._options)
        self.connection_pool = _Pool(password=token, http_client=self)
        self.connection = None  # no single connection (outage_replies.drop_connections)

    # ---- what redis-py clients offer -----------------------------------------------------
    def get_encoder(self) -> Any:
        from redis._parsers.encoders import Encoder

        return Encoder("utf-8", "strict", False)  # type: ignore[no-untyped-call, unused-ignore]

    def register_script(self, script: str) -> Script:
        return Script(self, script)  # type: ignore[arg-type]

    def pipeline(self, transaction: bool = False) -> HttpPipeline:
        """Commands sent in one request; ``transaction``: serve runs them in MULTI/EXEC."""
        return HttpPipeline(self, transaction)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = self.send([[_plain(arg) for arg in args]])[0]
        if isinstance(reply, redis.RedisError):
            raise reply
        return reply

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVAL", script, numkeys, *keys_and_args)

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    def script_load(self, script: str) -> str:
        sha = self.execute_command("SCRIPT", "LOAD", script)
        return sha.decode() if isinstance(sha, bytes) else str(sha)

    def ping(self) -> bool:
        return bool(self.execute_command("PING"))

    def hget(self, name: str, key: str) -> Any:
        return self.execute_command("HGET", name, key)

    def hmget(self, name: str, keys: Sequence[str], *args: str) -> Any:
        return self.execute_command("HMGET", name, *keys, *args)

    def hgetall(self, name: str) -> dict[bytes, bytes]:
        flat = self.execute_command("HGETALL", name)
        return dict(flat) if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2],
                                                                  strict=True))

    def lrange(self, name: str, start: int, end: int) -> Any:
        return self.execute_command("LRANGE", name, start, end)

    def hkeys(self, name: str) -> Any:
        return self.execute_command("HKEYS", name)

    def hset(self, name: str, mapping: dict[Any, Any]) -> int:
        flat = [part for pair in mapping.items() for part in pair]
        return int(self.execute_command("HSET", name, *flat))

    def pexpire(self, name: str, time_ms: int) -> bool:
        return bool(self.execute_command("PEXPIRE", name, time_ms))

    def info(self, *sections: str) -> dict[str, Any]:
        raise redis.ResponseError("INFO is not served to nodes over HTTP")

    def pubsub(self, **kwargs: Any) -> Any:
        raise redis.exceptions.NoPermissionError(
            "NOPERM a node over HTTP follows the control state by re-reads")

    def close(self) -> None:
        self._http.close()

    # ---- the transport -------------------------------------------------------------------
    def drop_connections(self) -> None:
        """Open a new connection for the next call (serve's address may lead elsewhere now)."""
        import httpx

        with self._lock:
            old, self._http = self._http, httpx.Client(base_url=self._base, **self._options)
        old.close()

    def send(self, commands: list[list[Any]], transaction: bool = False) -> list[Any]:
        """Each command's reply, in order, or the redis-py error it met (not raised); raises
        ``redis.ConnectionError`` or ``redis.AuthenticationError`` if none ran for sure."""
        import httpx

        body = msgpack.packb({"calls": commands, "multi": transaction}, use_bin_type=True)
        try:
            with self._lock:
                http = self._http
            reply = http.post(self._path, content=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise redis.ConnectionError(f"clustersync serve at {self._base}: {exc}") from None
        if reply.status_code in (401, 403):
            raise redis.AuthenticationError(f"clustersync serve refused the token "
                                            f"({reply.status_code}): {_detail(reply)}")
        if reply.status_code != 200:
            raise redis.ConnectionError(f"clustersync serve at {self._base} answered "
                                        f"{reply.status_code}: {_detail(reply)}")
        answers = msgpack.unpackb(reply.content, raw=True, strict_map_key=False)
        return [_reply_of(answer) for answer in answers[b"replies"]]


def _detail(reply: Any) -> str:
    try:
        return str(reply.json().get("error", ""))[:300]
    except Exception:
        return str(reply.text)[:300]


def _reply_of(answer: list[Any]) -> Any:
    """``[0, value]`` is a reply; ``[1, kind, message]`` an error Redis answered."""
    if answer[0] == 0:
        return answer[1]
    return error_of(answer[1].decode(), answer[2].decode())


def tls_context(verify: bool | str, cert: tuple[str, str] | None) -> ssl.SSLContext:
    """How serve's certificate is checked: against the system's CAs, the CA file ``verify``
    names, or not at all (``verify`` False); ``cert``: the certificate and key files the node
    shows serve, if any."""
    context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
    if verify is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(cert[0], cert[1] or None)
    return context


class HttpPipeline:
    """Commands queued and sent in one HTTP request (``redis.client.Pipeline``'s subset)."""

    def __init__(self, client: HttpRedis, transaction: bool = False) -> None:
        self._client = client
        self._transaction = transaction
        self._commands: list[list[Any]] = []

    def __len__(self) -> int:
        return len(self._commands)

    def execute_command(self, *args: Any, **options: Any) -> HttpPipeline:
        self._commands.append(list(args))
        return self

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> HttpPipeline:
        return self.execute_command("EVAL", script, numkeys, *keys_and_args)

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> HttpPipeline:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    def hget(self, name: str, key: str) -> HttpPipeline:
        return self.execute_command("HGET", name, key)

    def hmget(self, name: str, keys: Sequence[str], *args: str) -> HttpPipeline:
        return self.execute_command("HMGET", name, *keys, *args)

    def lrange(self, name: str, start: int, end: int) -> HttpPipeline:
        return self.execute_command("LRANGE", name, start, end)

    def hgetall(self, name: str) -> HttpPipeline:
        return self.execute_command("HGETALL", name)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        # (as redis-py's: a value it cannot encode fails the whole pipeline, before any send)
        commands = [[_plain(arg) for arg in command] for command in self._commands]
        self._commands = []
        replies = self._client.send(commands, self._transaction) if commands else []
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, redis.RedisError):
                    raise reply
        return replies


def _plain(arg: Any) -> Any:
    """An argument as Redis would get it (redis-py refuses the same types: DataError)."""
    if isinstance(arg, bool) or arg is None:
        raise redis.DataError(f"Invalid input of type: {type(arg).__name__!r}. Convert to a "
                              "bytes, string, int or float first.")
    if isinstance(arg, (bytes, str, int, float)):
        return arg
    if isinstance(arg, memoryview):
        return bytes(arg)
    raise redis.DataError(f"Invalid input of type: {type(arg).__name__!r}")


def http_client(url: str, token: str, job: str, node_id: str, timeout_s: float = 10.0,
                verify: bool | str = True, cert: tuple[str, str] | None = None) -> redis.Redis:
    """An ``HttpRedis``, typed as the client the store takes (it offers the subset the store
    uses of one)."""
    return cast(redis.Redis, HttpRedis(url, token, job, node_id, timeout_s, verify,
                                       cert=cert))


def script_sha(text: str | bytes) -> str:
    """The SHA1 Redis names a script by."""
    return hashlib.sha1(text.encode() if isinstance(text, str) else text).hexdigest()
