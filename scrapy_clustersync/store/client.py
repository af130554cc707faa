"""Build the redis-py client from ``CLUSTERSYNC_REDIS_URL`` and the TLS settings."""

from __future__ import annotations

import ssl

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..config import TlsOptions, validate_redis_url


def make_client(
    url: str, tls: TlsOptions | None = None, socket_timeout_s: float = 10.0
) -> redis.Redis:
    """A client for ``url`` (redis://, rediss:// or unix://; user:password work with ACLs).

    redis-py's own retries are off: the caller retries with backoff, and every script call is
    safe to run twice, so a retry never doubles a change.
    """
    validate_redis_url(url)
    options: dict[str, object] = {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": min(socket_timeout_s, 5.0),
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
        **short_handshake(),
    }
    if url.startswith("rediss://") and tls is not None:
        if tls.ca_certs:
            options["ssl_ca_certs"] = tls.ca_certs
        if tls.certfile:
            options["ssl_certfile"] = tls.certfile
        if tls.keyfile:
            options["ssl_keyfile"] = tls.keyfile
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED if tls.verify else ssl.CERT_NONE
    if url.startswith("unix://"):
        options.pop("socket_connect_timeout")
    return redis.Redis.from_url(url, **options)


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
    pool = client.connection_pool
    own = pool.__class__(connection_class=pool.connection_class, **pool.connection_kwargs)
    return redis.Redis(connection_pool=own)
