"""The forms of ``CLUSTERSYNC_REDIS_URL``, and the TLS files they may name.

One Redis: ``redis://[user:password@]host:port/db``, ``rediss://`` for TLS, or
``unix:///path/to/redis.sock``. Through Sentinel:
``redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB]`` (``rediss+sentinel://``
for TLS): the addresses are the sentinels', the service is the name they monitor the primary
under, and the user and password are those of the Redis servers (the primary and its replicas).
A sentinel that wants a password of its own takes it from the query
(``?sentinel_password=...``, and ``sentinel_username=...``). A Redis Cluster:
``redis+cluster://[user:password@]host:port[,host:port...]/`` (``rediss+cluster://`` for TLS):
the addresses are some of the cluster's nodes (one is enough, more let a node start while one
is down), from which the client learns every primary; a cluster has database 0 only.

TLS files come from the settings (``CLUSTERSYNC_TLS_CA_CERTS``, ``_CERTFILE``, ``_KEYFILE``) or
from the URL's query as redis-py reads it (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``);
each named file must exist and be readable, and none may be given with a plain-text URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .url_secrets import redact_url

#: the schemes of one Redis
PLAIN_SCHEMES = ("redis", "rediss", "unix")
#: the schemes of a primary found through Sentinel
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
#: the schemes of a Redis Cluster
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
URL_SCHEMES = PLAIN_SCHEMES + SENTINEL_SCHEMES + CLUSTER_SCHEMES
TLS_SCHEMES = ("rediss", "rediss+sentinel", "rediss+cluster")
#: the port of a sentinel given without one
SENTINEL_PORT = 26379
#: the port of a cluster node given without one
CLUSTER_PORT = 6379
#: the query parameters of a Sentinel URL: for the sentinels themselves, and the TLS files
SENTINEL_QUERY_NAMES = frozenset({"sentinel_username", "sentinel_password"})
TLS_QUERY_NAMES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")

_ACCEPTED = (
    "accepted: redis://host:port/db, rediss://host:port/db (TLS), "
    "unix:///path/to/redis.sock, redis+sentinel://host:port[,host:port...]/SERVICE[/DB] or "
    "rediss+sentinel://... (TLS), redis+cluster://host:port[,host:port...]/ or "
    "rediss+cluster://... (TLS)"
)


class UrlError(ValueError):
    """The URL cannot work; the message says why and what is accepted (password masked)."""


@dataclass(frozen=True)
class SentinelUrl:
    """A ``redis+sentinel://`` URL, split: where the sentinels are and what to ask them."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    #: the sentinels' own credentials (``sentinel_username``/``sentinel_password``)
    sentinel_auth: dict[str, str] = field(default_factory=dict)
    #: the TLS files named in the query (``ssl_ca_certs``, ...)
    tls_files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterUrl:
    """A ``redis+cluster://`` URL, split: the nodes to learn the cluster from, and the
    credentials and TLS files every node of the cluster is reached with."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    tls: bool = False
    #: the TLS files named in the query (``ssl_ca_certs``, ...)
    tls_files: dict[str, str] = field(default_factory=dict)


def scheme_of(url: str) -> str:
    """The URL's scheme, lower case ("" if it has none)."""
    return url.partition("://")[0].lower() if "://" in url else ""


def is_sentinel_url(url: str) -> bool:
    return scheme_of(url) in SENTINEL_SCHEMES


def is_cluster_url(url: str) -> bool:
    return scheme_of(url) in CLUSTER_SCHEMES


def is_tls_url(url: str) -> bool:
    return scheme_of(url) in TLS_SCHEMES


def check_url(url: str, given_as: str) -> None:
    """Raise UrlError, naming ``given_as``, unless ``url`` is one of the accepted forms."""
    scheme = scheme_of(url)
    if scheme not in URL_SCHEMES:
        raise UrlError(f"{given_as} {redact_url(url)!r} has scheme {scheme!r}; {_ACCEPTED}.")
    if scheme in SENTINEL_SCHEMES:
        parse_sentinel_url(url, given_as)
    if scheme in CLUSTER_SCHEMES:
        parse_cluster_url(url, given_as)
    check_tls_files(url_tls_files(url), url, given_as)


def parse_sentinel_url(url: str, given_as: str = "CLUSTERSYNC_REDIS_URL") -> SentinelUrl:
    """Split a ``redis+sentinel://`` URL; UrlError saying what is wrong with it."""
    shown = redact_url(url)
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    steps = [unquote(step) for step in parts.path.split("/")[1:] if step]
    if not hosts or not 1 <= len(steps) <= 2:
        raise UrlError(f"{given_as} {shown!r} must name the sentinels and the service: "
                       "redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB]")
    db = steps[1] if len(steps) == 2 else "0"
    if not db.isdigit():
        raise UrlError(f"{given_as} {shown!r}: the database after the service must be a "
                       f"number, not {db!r}")
    query = dict(parse_qsl(parts.query))
    unknown = sorted(set(query) - SENTINEL_QUERY_NAMES - set(TLS_QUERY_NAMES))
    if unknown:
        raise UrlError(f"{given_as} {shown!r}: unknown query parameter(s) {', '.join(unknown)}; "
                       f"accepted: {', '.join(sorted(SENTINEL_QUERY_NAMES))}, "
                       f"{', '.join(TLS_QUERY_NAMES)}")
    return SentinelUrl(
        sentinels=tuple(_address(each, shown, given_as) for each in hosts.split(",")),
        service=steps[0], db=int(db),
        username=unquote(username) or None, password=unquote(password) or None,
        tls=scheme_of(url) in TLS_SCHEMES,
        sentinel_auth={name: value for name, value in query.items()
                       if name in SENTINEL_QUERY_NAMES},
        tls_files={name: value for name, value in query.items() if name in TLS_QUERY_NAMES},
    )


def parse_cluster_url(url: str, given_as: str = "CLUSTERSYNC_REDIS_URL") -> ClusterUrl:
    """Split a ``redis+cluster://`` URL; UrlError saying what is wrong with it."""
    shown = redact_url(url)
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    if not hosts:
        raise UrlError(f"{given_as} {shown!r} must name at least one node of the cluster: "
                       "redis+cluster://[user:password@]host:port[,host:port...]/")
    if parts.path.strip("/") not in ("", "0"):
        raise UrlError(f"{given_as} {shown!r}: a Redis Cluster has database 0 only; end the URL "
                       f"with the nodes and '/', not {parts.path!r}")
    query = dict(parse_qsl(parts.query))
    unknown = sorted(set(query) - set(TLS_QUERY_NAMES))
    if unknown:
        raise UrlError(f"{given_as} {shown!r}: unknown query parameter(s) {', '.join(unknown)}; "
                       f"accepted: {', '.join(TLS_QUERY_NAMES)}")
    return ClusterUrl(
        nodes=tuple(_address(each, shown, given_as, "cluster node", CLUSTER_PORT)
                    for each in hosts.split(",")),
        username=unquote(username) or None, password=unquote(password) or None,
        tls=scheme_of(url) in TLS_SCHEMES,
        tls_files={name: value for name, value in query.items() if name in TLS_QUERY_NAMES},
    )


def _address(text: str, shown: str, given_as: str, what: str = "sentinel",
             default_port: int = SENTINEL_PORT) -> tuple[str, int]:
    """``host:port``, ``host`` (``default_port``) or ``[v6]:port`` of one sentinel (or
    cluster node)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host or (port and not port.isdigit()):
        raise UrlError(f"{given_as} {shown!r}: {text!r} is not a {what}'s host:port")
    return host, int(port) if port else default_port


def url_tls_files(url: str) -> dict[str, str]:
    """The TLS files a URL's query names (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``)."""
    query = dict(parse_qsl(urlsplit(url).query)) if "?" in url else {}
    return {name: query[name] for name in TLS_QUERY_NAMES if query.get(name)}


def check_tls_files(files: dict[str, str], url: str, given_as: str) -> None:
    """Raise UrlError if TLS files are named for a plain-text URL, or one of them cannot be
    read: the node would otherwise talk in the clear, or fail later with a vaguer error."""
    if not files:
        return
    if not is_tls_url(url):
        raise UrlError(
            f"{', '.join(files)} given, but {given_as} {redact_url(url)!r} is not a TLS URL: "
            "use rediss://... (or rediss+sentinel://..., rediss+cluster://...), or leave the "
            "TLS files unset")
    for name, path in files.items():
        if not os.path.isfile(path):
            raise UrlError(f"{name} = {path!r}: no such file (a PEM file must be there)")
        if not os.access(path, os.R_OK):
            raise UrlError(f"{name} = {path!r}: this user cannot read the file")
