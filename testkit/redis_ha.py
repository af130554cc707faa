"""Redis beyond one plain server, for tests: a TLS-only server, and a primary with a replica
watched by sentinels, all real ``redis-server`` processes on free ports of 127.0.0.1.

`TlsRedisServer` listens for TLS only (``--port 0``): nothing can reach it in the clear.
`SentinelGroup` runs a primary, a replica and three sentinels (quorum 2) with short failure
detection, so a killed primary is replaced within a few seconds; with certificates, every one of
them speaks TLS only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from ._service import Service
from .proxy import TcpProxy
from .redis_server import LOCALHOST, RedisServer, redis_server_binary
from .tls_certs import CertFiles

__all__ = ["SentinelGroup", "SentinelServer", "TlsRedisServer"]

#: a replica's first full sync starts at once, not after the default 5 s wait for others
REPLICATION_ARGS = ("--repl-diskless-sync-delay", "0")
_POLL_S = 0.05


def tls_args(port: int, certs: CertFiles) -> list[str]:
    """redis-server options to listen on ``port`` for TLS only, with ``certs``, asking every
    client for a certificate of the same CA, and replicating over TLS too."""
    return ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(certs.cert),
            "--tls-key-file", str(certs.key), "--tls-ca-cert-file", str(certs.ca),
            "--tls-auth-clients", "yes", "--tls-replication", "yes"]


def tls_kwargs(files: CertFiles) -> dict[str, Any]:
    """redis-py's TLS keywords for a client holding ``files``."""
    return {"ssl_ca_certs": str(files.ca), "ssl_certfile": str(files.cert),
            "ssl_keyfile": str(files.key)}


def answering_pid(url: str, **kwargs: Any) -> int | None:
    """The ``process_id`` the server at ``url`` reports, None if it does not answer."""
    probe = redis.Redis.from_url(url, socket_timeout=0.5, **kwargs)
    try:
        return int(probe.info("server")["process_id"])
    except (redis.RedisError, OSError, KeyError):
        return None
    finally:
        probe.close()


class TlsRedisServer(RedisServer):
    """A ``redis-server`` that speaks TLS only, with ``certs`` (its certificate, key and the CA
    that must have signed every client's certificate: ``--tls-auth-clients yes``)."""

    def __init__(self, directory: str | Path, certs: CertFiles, port: int | None = None,
                 password: str | None = None, extra_args: Sequence[str] = ()) -> None:
        super().__init__(directory, port=port, password=password, extra_args=extra_args)
        self.certs = certs

    @property
    def url(self) -> str:
        """``rediss://[:password@]127.0.0.1:PORT/0`` (the TLS files go in the settings)."""
        return "rediss" + super().url[len("redis"):]

    def command_line(self) -> list[str]:
        return super().command_line() + tls_args(self.port, self.certs)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A client holding the server's own files (the CA signed them for both ends)."""
        return super().client(**{**tls_kwargs(self.certs), **kwargs})

    def answering_pid(self) -> int | None:
        return answering_pid(self.url, **tls_kwargs(self.certs))


class SentinelServer(RedisServer):
    """One sentinel (``redis-server CONF --sentinel``) watching ``service`` on
    ``primary_port``; it rewrites its config file in ``directory`` as sentinels do. With
    ``certs`` it speaks TLS only, to its clients and to the servers."""

    def __init__(self, directory: str | Path, service: str, primary_port: int,
                 down_after_ms: int, failover_timeout_ms: int,
                 certs: CertFiles | None = None) -> None:
        super().__init__(directory)
        self.certs = certs
        self.config_lines = [
            f"sentinel monitor {service} {LOCALHOST} {primary_port} 2",
            f"sentinel down-after-milliseconds {service} {down_after_ms}",
            f"sentinel failover-timeout {service} {failover_timeout_ms}",
            f"sentinel parallel-syncs {service} 1",
        ]

    def command_line(self) -> list[str]:
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError("redis-server not found: install it (apt-get install "
                                    "redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "sentinel.conf"
        config.write_text("\n".join(self.config_lines) + "\n")
        line = [binary, str(config), "--sentinel", "--port", str(self.port), "--bind",
                LOCALHOST, "--dir", str(self.directory), "--daemonize", "no",
                "--logfile", str(self.log_path)]
        return line + (tls_args(self.port, self.certs) if self.certs else [])

    @property
    def url(self) -> str:
        return ("rediss" if self.certs else "redis") + super().url[len("redis"):]

    def client(self, **kwargs: Any) -> redis.Redis:
        return super().client(**{**(tls_kwargs(self.certs) if self.certs else {}), **kwargs})

    def answering_pid(self) -> int | None:
        if self.certs is None:
            return super().answering_pid()
        return answering_pid(self.url, **tls_kwargs(self.certs))


class SentinelGroup(Service):
    """A primary, a replica of it, and ``sentinel_count`` sentinels watching them.

    ``url``: ``redis+sentinel://127.0.0.1:P1,.../SERVICE/0``. `start` returns once the replica
    is in sync and every sentinel knows the replica and the other sentinels, so a failover can
    happen from then on. ``cuttable``: the replica replicates through a proxy, so that
    `cut_replication` can leave it behind the primary (give a ``failover_timeout_ms`` longer
    than the test: sentinels point a replica that replicates from another address than the
    primary's back at the primary once that long has passed)."""

    def __init__(self, directory: str | Path, service: str = "crawl", sentinel_count: int = 3,
                 down_after_ms: int = 500, failover_timeout_ms: int = 3000,
                 extra_args: Sequence[str] = (), cuttable: bool = False,
                 certs: CertFiles | None = None) -> None:
        self.directory = Path(directory)
        self.service = service
        self.certs = certs
        args = (*REPLICATION_ARGS, *extra_args)
        self.primary, self.replica = (
            TlsRedisServer(self.directory / name, certs, extra_args=args) if certs else
            RedisServer(self.directory / name, extra_args=args) for name in ("primary", "replica"))
        self.servers = [self.primary, self.replica]
        self.sentinels = [
            SentinelServer(self.directory / f"sentinel-{i}", service, self.primary.port,
                           down_after_ms, failover_timeout_ms, certs)
            for i in range(sentinel_count)]
        self._sentinel_clients: dict[int, redis.Redis] = {}
        self.link = TcpProxy(LOCALHOST, self.primary.port) if cuttable else None

    @property
    def url(self) -> str:
        hosts = ",".join(f"{LOCALHOST}:{each.port}" for each in self.sentinels)
        return f"{'rediss' if self.certs else 'redis'}+sentinel://{hosts}/{self.service}/0"

    def start(self, timeout_s: float = 30.0) -> SentinelGroup:
        self.primary.start()
        upstream = self.primary.port
        if self.link is not None:
            upstream = self.link.start().port
        self.replica.extra_args += ("--replicaof", LOCALHOST, str(upstream))
        self.replica.start()
        deadline = time.monotonic() + timeout_s
        replica = self.replica.client(socket_timeout=1)
        _wait(lambda: replica.info("replication").get("master_link_status")
              == "up", deadline, "the replica to sync")
        for sentinel in self.sentinels:
            sentinel.start()
        others = len(self.sentinels) - 1
        _wait(lambda: all(self._knows_all(each, others) for each in self.sentinels), deadline,
              "every sentinel to know the replica and the other sentinels")
        return self

    def _knows_all(self, sentinel: SentinelServer, others: int) -> bool:
        state: Any = self._asking(sentinel).sentinel_master(self.service)
        return bool(int(state["num-slaves"]) >= 1 and int(state["num-other-sentinels"]) >= others)

    def primary_port(self) -> int | None:
        """The port of the primary the first sentinel that answers names, None if none does."""
        for sentinel in self.sentinels:
            try:
                address: Any = self._asking(sentinel).sentinel_get_master_addr_by_name(
                    self.service)
            except (redis.RedisError, OSError):
                continue
            return int(address[1]) if address else None
        return None

    def _asking(self, sentinel: SentinelServer) -> redis.Redis:
        if sentinel.port not in self._sentinel_clients:
            self._sentinel_clients[sentinel.port] = sentinel.client(socket_timeout=0.5)
        return self._sentinel_clients[sentinel.port]

    def current_primary(self) -> RedisServer:
        port = self.primary_port()
        return next(each for each in self.servers if each.port == port)

    def wait_for_failover(self, old_port: int, timeout_s: float = 30.0) -> RedisServer:
        """The server the sentinels promoted once they no longer name ``old_port``."""
        _wait(lambda: self.primary_port() not in (None, old_port),
              time.monotonic() + timeout_s, "the sentinels to promote the replica")
        return self.current_primary()

    def cut_replication(self) -> None:
        """Cut the replica from the primary (``cuttable`` only): what the primary confirms from
        now on never reaches the replica."""
        assert self.link is not None, "a SentinelGroup(cuttable=True) only"
        self.link.cut()

    def stop(self) -> None:
        for each in [*self.sentinels, *self.servers]:
            each.stop()
        if self.link is not None:
            self.link.stop()


def _wait(condition: Any, deadline: float, what: str) -> None:
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(_POLL_S)
    raise RuntimeError(f"timed out waiting for {what}")

