"""Build the redis-py client from ``CLUSTERSYNC_REDIS_URL`` and the TLS settings."""

from __future__ import annotations

import ssl

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from ..config import TlsOptions, validate_redis_url
from ..redis_urls import (
    ClusterUrl,
    SentinelUrl,
    is_cluster_url,
    is_sentinel_url,
    is_tls_url,
    parse_cluster_url,
    parse_sentinel_url,
)
from .cluster_client import LazyRedisCluster

#: how often a cluster client follows MOVED/ASK (or retries a node it lost) within one call:
#: a failover or a resharding moves slots, and the client learns where they went
CLUSTER_RETRIES = 3


def make_client(
    url: str, tls: TlsOptions | None = None, socket_timeout_s: float = 10.0
) -> redis.Redis:
    """A client for ``url`` (redis://, rediss://, unix://, redis+sentinel:// and
    rediss+sentinel:// through Sentinel, or redis+cluster:// and rediss+cluster:// for a Redis
    Cluster: cluster_client.py; user:password work with ACLs). ``tls``: the
    CLUSTERSYNC_TLS_* files, for a TLS URL only.

    redis-py's own retries are off: the caller retries with backoff, and every script call is
    safe to run twice, so a retry never doubles a change. Through Sentinel, each new connection
    asks the sentinels where the primary is, and a pooled connection to a server that is no
    longer the primary is dropped (READONLY, or the address the sentinels give changed): the
    call that found it fails as an outage, and its retry reaches the new primary.
    """
    validate_redis_url(url)
    options: dict[str, object] = {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": min(socket_timeout_s, 5.0),
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
        **short_handshake(),
    }
    if is_tls_url(url):
        options.update(tls_options(tls))
    if url.startswith("unix://"):
        options.pop("socket_connect_timeout")
    if is_sentinel_url(url):
        return sentinel_client(parse_sentinel_url(url), options)
    if is_cluster_url(url):
        return cluster_client(parse_cluster_url(url), options)
    return redis.Redis.from_url(url, **options)


def tls_options(tls: TlsOptions | None) -> dict[str, object]:
    """redis-py's TLS keywords for the CLUSTERSYNC_TLS_* settings (none: its defaults, the
    system's CAs and a verified certificate)."""
    if tls is None:
        return {}
    options: dict[str, object] = {
        "ssl_cert_reqs": ssl.CERT_REQUIRED if tls.verify else ssl.CERT_NONE}
    if not tls.verify:
        options["ssl_check_hostname"] = False
    for name, value in (("ssl_ca_certs", tls.ca_certs), ("ssl_certfile", tls.certfile),
                        ("ssl_keyfile", tls.keyfile)):
        if value:
            options[name] = value
    return options


def sentinel_client(url: SentinelUrl, options: dict[str, object]) -> redis.Redis:
    """A client of the primary the sentinels of ``url`` name for its service. The sentinels
    are reached with the same timeouts and TLS as the primary, and their own credentials."""
    tls = {"ssl": True, **url.tls_files} if url.tls else {}
    own = {**options, **tls}
    sentinel_kwargs = {name: value for name, value in own.items()
                       if name.startswith(("socket_", "ssl"))}
    auth = {name.removeprefix("sentinel_"): value for name, value in url.sentinel_auth.items()}
    sentinels = Sentinel(list(url.sentinels), sentinel_kwargs={**sentinel_kwargs, **auth})
    own.update(db=url.db, username=url.username, password=url.password)
    client: redis.Redis = sentinels.master_for(url.service, **own)  # type: ignore[arg-type]
    return client


def cluster_client(url: ClusterUrl, options: dict[str, object]) -> redis.Redis:
    """A client of the Redis Cluster that the nodes of ``url`` belong to (built on its first
    command: cluster_client.py). Every node is reached with the same credentials, timeouts and
    TLS. A call follows up to CLUSTER_RETRIES redirections (every script call is safe to run
    twice); beyond that it fails as an outage and the caller retries with backoff."""
    own = {**options, **({"ssl": True, **url.tls_files} if url.tls else {})}
    own.update(username=url.username, password=url.password,
               retry=Retry(NoBackoff(), CLUSTER_RETRIES))
    own.pop("health_check_interval", None)  # not a cluster client's option
    return LazyRedisCluster(url.nodes, **own)  # type: ignore[return-value]


def short_handshake() -> dict[str, object]:
    """Options that keep what a new connection sends before its first command to HELLO and its
    health check. Each command of the handshake is a round trip, and a node far from Redis waits
    that long: at start-up, and when its control subscription takes a connection of its own (5
    round trips with redis-py 8's defaults, 300 ms at 30 ms each way). Left out: CLIENT SETINFO
    (the library's name and version in CLIENT LIST, two round trips) and redis-py 8's
    maintenance notifications (one, for a managed Redis's planned failovers; a node reconnects
    after any failover on its own)."""
    options: dict[str, object] = {}
    try:
        from redis.driver_info import DriverInfo  # noqa: F401  (redis-py 8: driver_info=None)
    except ImportError:
        options.update(lib_name=None, lib_version=None)
    else:
        options["driver_info"] = None
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:
        pass
    else:
        options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    return options


def client_of_its_own(client: redis.Redis) -> redis.Redis:
    """A client with the options of ``client`` and connections of its own: a subscription that
    took one of ``client``'s pooled connections would leave ``client`` to open another on its
    next call, paying that connection's handshake where the caller waits for an answer."""
    if isinstance(client, LazyRedisCluster):
        return client.another()
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):  # its own pool, asking the same sentinels
        kwargs = {name: value for name, value in pool.connection_kwargs.items()
                  if name != "connection_pool"}
        return redis.Redis(connection_pool=SentinelConnectionPool(  # type: ignore[no-untyped-call]
            pool.service_name, pool.sentinel_manager, connection_class=pool.connection_class,
            is_master=pool.is_master, check_connection=pool.check_connection, **kwargs))
    own = pool.__class__(connection_class=pool.connection_class, **pool.connection_kwargs)
    return redis.Redis(connection_pool=own)
