"""Every ``CLUSTERSYNC_*`` setting: its default, its unit and its validation.

Settings are read once, when a component is built, and checked up front: a bad value stops the
node at start-up with an error that names the setting, what was given and what is accepted.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from .redis_urls import UrlError, check_tls_files, check_url
from .url_secrets import redact_url as _redact_url

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: The default of every setting; they need no tuning for a cluster of a few nodes. An empty
#: or zero default is one derived at start-up (the README's settings table says from what; a
#: unit test checks that table against this one).
DEFAULTS: dict[str, str | int | float | bool] = {
    "CLUSTERSYNC_REDIS_URL": "",
    # a node that cannot reach Redis: `clustersync serve`'s URL and a token (docs/http-workers.md)
    "CLUSTERSYNC_URL": "",
    # the `clustersync` command's reads only: a replica near the operator (never the writes)
    "CLUSTERSYNC_READ_URL": "",
    # where the node runs: the sites pinned to its region are its first (regions.py)
    "CLUSTERSYNC_REGION": "",
    "CLUSTERSYNC_TOKEN": "",
    "CLUSTERSYNC_JOB": "",
    "CLUSTERSYNC_IDLE_CLOSE_AFTER": 0.5,
    "CLUSTERSYNC_LEASE_TIMEOUT": 60.0,
    "CLUSTERSYNC_HEARTBEAT_INTERVAL": 1.0,
    "CLUSTERSYNC_NODE_DEAD_AFTER": 0.0,  # 0 = three heartbeat intervals
    "CLUSTERSYNC_NODE_RETENTION": 86_400.0,  # 0 = keep every node's record
    "CLUSTERSYNC_BATCH_SIZE": 200,
    "CLUSTERSYNC_PREFETCH": 0,  # 0 = twice CONCURRENT_REQUESTS
    "CLUSTERSYNC_BUFFER_LIMIT": 100_000,
    "CLUSTERSYNC_MAX_REQUEST_BYTES": 512 * 1024,
    "CLUSTERSYNC_LOCAL_SEEN_CACHE": 200_000,
    "CLUSTERSYNC_SOCKET_TIMEOUT": 10.0,
    # how many partitions (hash tags) a job is split into over a Redis Cluster's primaries
    "CLUSTERSYNC_PARTITIONS": 1,
    "CLUSTERSYNC_TLS_CA_CERTS": "",
    "CLUSTERSYNC_TLS_CERTFILE": "",
    "CLUSTERSYNC_TLS_KEYFILE": "",
    "CLUSTERSYNC_TLS_VERIFY": True,
    "CLUSTERSYNC_DEDUP": "bloom",
    "CLUSTERSYNC_BLOOM_CAPACITY": 10_000_000,
    "CLUSTERSYNC_BLOOM_ERROR_RATE": 0.001,
    "CLUSTERSYNC_RECRAWL": "",
    "CLUSTERSYNC_FAILED_KEEP": 1000,
    "CLUSTERSYNC_SETTINGS_HISTORY": 1000,
    "CLUSTERSYNC_POLITENESS": "cluster",  # one budget per site for the cluster; "node": Scrapy's
    # shared settings that may also come from settings.py (live_settings.py checks them)
    "CLUSTERSYNC_PROXY": "",  # none: no proxy
    "CLUSTERSYNC_SITE_DELAYS": "",  # none: DOWNLOAD_DELAY for every site
    # read by the scheduler when it builds the codec and the spool
    "CLUSTERSYNC_REQUEST_CLASSES": "",  # import paths, a list or "a.B,c.D"; empty: Scrapy's only
    "CLUSTERSYNC_SPOOL_DIR": ".clustersync-spool",
    # the results stream (docs/results.md)
    "CLUSTERSYNC_RESULTS": True,
    "CLUSTERSYNC_RESULTS_MAX": 1_000_000,
    "CLUSTERSYNC_RESULT_MAX_BYTES": 1024 * 1024,
    "CLUSTERSYNC_RESULTS_PAGES": False,
    "CLUSTERSYNC_RESULTS_PAGE_MAX_BYTES": 1024 * 1024,
}
#: the most failed requests a job may keep (each about 300-600 bytes of Redis)
FAILED_KEEP_MAX = 1_000_000
#: the most shared settings changes a job's history may keep (each about 100-300 bytes)
SETTINGS_HISTORY_MAX = 1_000_000
DEDUP_MODES = ("bloom", "exact")
#: CLUSTERSYNC_NODE_DEAD_AFTER when unset: this many heartbeat intervals without one
DEAD_AFTER_HEARTBEATS = 3
#: the shortest CLUSTERSYNC_NODE_RETENTION (but 0, keep all): a node's record must outlive its
#: death long enough for `clustersync status` to show it, and for the node to hear of it
NODE_RETENTION_MIN_S = 60.0
#: a prefetch sized from what the node can start holds at most this many times
#: CONCURRENT_REQUESTS
SIZED_PREFETCH_MAX = 8
#: what the first node of a new run does with a finished job: "" stop (exit non-zero),
#: "keep-seen" restart it (only URLs not seen before are crawled), "forget-seen" restart it
#: and forget the seen record (every URL is crawled again)
RECRAWL_MODES = ("", "keep-seen", "forget-seen")
#: "cluster": one politeness budget per site for the whole cluster (plugin/cluster_turns.py);
#: "node": Scrapy's own, per node (each node keeps DOWNLOAD_DELAY on its own)
POLITENESS_MODES = ("cluster", "node")

#: the most entries CLUSTERSYNC_RESULTS_MAX may allow the results stream
RESULTS_MAX_LIMIT = 1_000_000_000

JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")

_Number = TypeVar("_Number", int, float)


#: the most partitions a job may be split into (CLUSTERSYNC_PARTITIONS)
MAX_PARTITIONS = 256


class ConfigError(ValueError):
    """A ``CLUSTERSYNC_*`` setting has a value that cannot work; the message says how to fix it."""


@dataclass(frozen=True)
class TlsOptions:
    """The ``CLUSTERSYNC_TLS_*`` settings: used for a ``rediss://``, ``rediss+sentinel://`` or
    ``rediss+cluster://`` URL only (``check`` refuses them with any other)."""

    ca_certs: str = ""
    certfile: str = ""
    keyfile: str = ""
    verify: bool = True

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> TlsOptions:
        return cls(ca_certs=settings.get("CLUSTERSYNC_TLS_CA_CERTS") or "",
                   certfile=settings.get("CLUSTERSYNC_TLS_CERTFILE") or "",
                   keyfile=settings.get("CLUSTERSYNC_TLS_KEYFILE") or "",
                   verify=settings.getbool("CLUSTERSYNC_TLS_VERIFY", True))

    def check(self, url: str, over_http: bool = False) -> TlsOptions:
        """Self, if every file named exists and ``url`` is a TLS URL (https:// for serve's,
        ``over_http``); else ConfigError."""
        files = {"CLUSTERSYNC_TLS_CA_CERTS": self.ca_certs,
                 "CLUSTERSYNC_TLS_CERTFILE": self.certfile,
                 "CLUSTERSYNC_TLS_KEYFILE": self.keyfile}
        named = {name: path for name, path in files.items() if path}
        try:
            if over_http and named and not url.startswith("https://"):
                raise UrlError(f"{', '.join(named)} given, but CLUSTERSYNC_URL "
                               f"{redact_url(url)!r} is not https://")
            # (serve's https:// URL checked above: the files are checked as for rediss://)
            check_tls_files(named, "rediss://" if over_http else url, "CLUSTERSYNC_REDIS_URL")
        except UrlError as exc:
            raise ConfigError(str(exc)) from None
        return self


@dataclass(frozen=True)
class DedupSettings:
    """How the job records fingerprints: a Bloom filter (default) or an exact set."""

    mode: str = "bloom"
    bloom_capacity: int = 10_000_000
    bloom_error_rate: float = 0.001

    def __post_init__(self) -> None:
        if self.mode not in DEDUP_MODES:
            raise ConfigError(
                f"CLUSTERSYNC_DEDUP = {self.mode!r} is not a dedup mode; accepted: 'bloom' "
                "(default: about 2 bytes per URL, skips the error rate of new URLs) or 'exact' "
                "(a set of 20-byte fingerprints: no URL skipped)."
            )
        if self.bloom_capacity < 1:
            raise ConfigError(
                f"CLUSTERSYNC_BLOOM_CAPACITY = {self.bloom_capacity!r} must be at least 1."
            )
        if not 0 < self.bloom_error_rate < 1:
            raise ConfigError(
                f"CLUSTERSYNC_BLOOM_ERROR_RATE = {self.bloom_error_rate!r} must be between 0 "
                "and 1, e.g. 0.001 for one new URL in a thousand skipped."
            )


@dataclass(frozen=True)
class ResultSettings:
    """The results settings (docs/results.md): whether items go to the job's results stream, its
    cap in entries, the largest item (its encoded bytes), and the raw pages (off by default)."""

    enabled: bool = True
    max_entries: int = 1_000_000
    item_max_bytes: int = 1024 * 1024
    pages: bool = False
    page_max_bytes: int = 1024 * 1024

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> ResultSettings:
        """Read and check the results settings; raise ConfigError naming a bad one."""
        return cls(
            enabled=settings.getbool("CLUSTERSYNC_RESULTS", True),
            max_entries=_number(settings, "CLUSTERSYNC_RESULTS_MAX", int, minimum=1,
                                maximum=RESULTS_MAX_LIMIT),
            item_max_bytes=_number(settings, "CLUSTERSYNC_RESULT_MAX_BYTES", int, minimum=1024),
            pages=settings.getbool("CLUSTERSYNC_RESULTS_PAGES", False),
            page_max_bytes=_number(settings, "CLUSTERSYNC_RESULTS_PAGE_MAX_BYTES", int,
                                   minimum=1024),
        )


def new_site_room(settings: BaseSettings) -> int:
    """What a site the node has not fetched from yet can put on the wire at once: one request
    with a ``DOWNLOAD_DELAY``, else its per-IP or per-domain concurrency."""
    if settings.getfloat("DOWNLOAD_DELAY") > 0:
        return 1
    per_site = (settings.getint("CONCURRENT_REQUESTS_PER_IP")
                or settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8))
    return max(1, min(per_site, settings.getint("CONCURRENT_REQUESTS", 16)))


@dataclass(frozen=True)
class ClusterConfig:
    """The validated settings of one node."""

    #: Redis's URL; with ``over_http``, the URL of the ``clustersync serve`` the node reaches
    #: its job through (CLUSTERSYNC_URL) instead
    redis_url: str
    job: str
    node_id: str
    idle_close_after_s: float
    lease_timeout_s: float
    heartbeat_interval_s: float
    batch_size: int
    prefetch: int
    buffer_limit: int
    max_request_bytes: int
    local_seen_cache: int
    socket_timeout_s: float
    tls: TlsOptions
    dedup: DedupSettings
    recrawl: str = ""
    #: how many failed requests the job keeps, newest first (0: none)
    failed_keep: int = 1000
    #: a node whose heartbeats stopped this long is declared dead and its leases go back
    node_dead_after_s: float = 3.0
    #: the records of nodes that left or died longer ago than this are pruned (0: never)
    node_retention_s: float = 86_400.0
    #: True: the prefetch is sized from what the node can start, up to ``prefetch``
    #: (CLUSTERSYNC_PREFETCH = 0); False: ``prefetch`` is its fixed size
    prefetch_sized: bool = False
    #: a sized prefetch's size before the node measured anything (``new_site_room``)
    prefetch_start: int = 1
    #: whose politeness: "cluster" (one budget per site) or "node" (Scrapy's, per node)
    politeness: str = "cluster"
    #: the results stream: on or off, its cap, the largest item, raw pages
    results: ResultSettings = ResultSettings()
    #: the node reaches its job through ``clustersync serve`` (CLUSTERSYNC_URL), not Redis
    over_http: bool = False
    #: the token it sends serve (CLUSTERSYNC_TOKEN; "" for none)
    http_token: str = ""
    #: CLUSTERSYNC_PARTITIONS: 1 is a job on one hash tag (today's layout)
    partitions: int = 1
    #: CLUSTERSYNC_PARTITIONS was set: a job of another partition count is refused; unset, the
    #: node follows the job's count (recorded in partition 0's meta when the job was created)
    partitions_given: bool = False
    #: the node's region (CLUSTERSYNC_REGION; "" for none): regions.py
    region: str = ""

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider_name: str) -> ClusterConfig:
        """Read and check every setting; raise :class:`ConfigError` naming the bad one."""
        from .regions import validate_region  # (it imports ConfigError from here)

        url, over_http = store_url(settings)
        job = validate_job_name(settings.get("CLUSTERSYNC_JOB") or spider_name)
        lease = _number(settings, "CLUSTERSYNC_LEASE_TIMEOUT", float, minimum=1.0)
        heartbeat = _number(settings, "CLUSTERSYNC_HEARTBEAT_INTERVAL", float, minimum=0.05)
        if heartbeat * 3 > lease:
            raise ConfigError(
                f"CLUSTERSYNC_HEARTBEAT_INTERVAL ({heartbeat}s) must be at most a third of "
                f"CLUSTERSYNC_LEASE_TIMEOUT ({lease}s), or live nodes lose their leases."
            )
        dead_after = validate_dead_after(
            _number(settings, "CLUSTERSYNC_NODE_DEAD_AFTER", float, minimum=0.0), heartbeat)
        prefetch = _number(settings, "CLUSTERSYNC_PREFETCH", int, minimum=0)
        sized = prefetch == 0  # sized from what the node can start (node/lease_sizing.py)
        if sized:
            prefetch = SIZED_PREFETCH_MAX * max(1, settings.getint("CONCURRENT_REQUESTS", 16))
        return cls(
            redis_url=url,
            job=job,
            node_id=make_node_id(),
            idle_close_after_s=_number(settings, "CLUSTERSYNC_IDLE_CLOSE_AFTER", float, 0.0),
            lease_timeout_s=lease,
            heartbeat_interval_s=heartbeat,
            batch_size=_number(settings, "CLUSTERSYNC_BATCH_SIZE", int, minimum=1, maximum=5000),
            prefetch=prefetch,
            prefetch_sized=sized,
            prefetch_start=new_site_room(settings) if sized else prefetch,
            buffer_limit=_number(settings, "CLUSTERSYNC_BUFFER_LIMIT", int, minimum=100),
            max_request_bytes=_number(settings, "CLUSTERSYNC_MAX_REQUEST_BYTES", int, minimum=1024),
            local_seen_cache=_number(settings, "CLUSTERSYNC_LOCAL_SEEN_CACHE", int, minimum=0),
            socket_timeout_s=_number(settings, "CLUSTERSYNC_SOCKET_TIMEOUT", float, minimum=0.1),
            tls=TlsOptions.from_settings(settings).check(url, over_http),
            dedup=DedupSettings(
                mode=str(settings.get("CLUSTERSYNC_DEDUP", DEFAULTS["CLUSTERSYNC_DEDUP"])),
                bloom_capacity=_number(settings, "CLUSTERSYNC_BLOOM_CAPACITY", int),
                bloom_error_rate=_number(settings, "CLUSTERSYNC_BLOOM_ERROR_RATE", float),
            ),
            recrawl=validate_recrawl(settings.get("CLUSTERSYNC_RECRAWL") or ""),
            failed_keep=validate_failed_keep(settings),
            politeness=validate_politeness(settings.get("CLUSTERSYNC_POLITENESS") or "cluster"),
            results=ResultSettings.from_settings(settings),
            node_dead_after_s=dead_after,
            node_retention_s=validate_node_retention(
                _number(settings, "CLUSTERSYNC_NODE_RETENTION", float, minimum=0.0), dead_after),
            over_http=over_http,
            http_token=str(settings.get("CLUSTERSYNC_TOKEN") or ""),
            partitions=validate_partitions(settings),
            partitions_given=settings.get("CLUSTERSYNC_PARTITIONS") is not None,
            region=validate_region(settings.get("CLUSTERSYNC_REGION")),
        )


def validate_partitions(settings: BaseSettings) -> int:
    """``CLUSTERSYNC_PARTITIONS``: 1 (a job on one hash tag), or more for a job split over a
    Redis Cluster's primaries, which this version cannot crawl yet: refused, saying so."""
    count = _number(settings, "CLUSTERSYNC_PARTITIONS", int, minimum=1, maximum=MAX_PARTITIONS)
    if count > 1:
        raise ConfigError(
            f"CLUSTERSYNC_PARTITIONS = {count}: a job split into partitions cannot be crawled "
            "by this version yet (its keys are laid out, its nodes do not route, lease or "
            "finish across partitions); leave it at 1: a job then lives on one primary.")
    return count


def validate_dead_after(dead_after_s: float, heartbeat_s: float) -> float:
    """``CLUSTERSYNC_NODE_DEAD_AFTER`` in seconds (0: three heartbeat intervals); raise
    ConfigError if it is under two heartbeat intervals: one late heartbeat would then be
    enough to declare a live node dead (its requests crawled twice)."""
    if dead_after_s == 0:
        return DEAD_AFTER_HEARTBEATS * heartbeat_s
    if dead_after_s < 2 * heartbeat_s:
        raise ConfigError(
            f"CLUSTERSYNC_NODE_DEAD_AFTER ({dead_after_s:g}s) must be at least two "
            f"CLUSTERSYNC_HEARTBEAT_INTERVAL ({heartbeat_s:g}s), or one late heartbeat declares "
            f"a live node dead; leave it unset for {DEAD_AFTER_HEARTBEATS} intervals "
            f"({DEAD_AFTER_HEARTBEATS * heartbeat_s:g}s)."
        )
    return dead_after_s


def validate_node_retention(retention_s: float, dead_after_s: float) -> float:
    """``CLUSTERSYNC_NODE_RETENTION`` in seconds (0: never prune); raise ConfigError if it is
    shorter than NODE_RETENTION_MIN_S or than ten NODE_DEAD_AFTER: a dead node's record (which
    tells it, should it come back, that its leases went back to the queue) must outlive a pause
    of the node by far."""
    shortest = max(NODE_RETENTION_MIN_S, 10 * dead_after_s)
    if retention_s != 0 and retention_s < shortest:
        raise ConfigError(
            f"CLUSTERSYNC_NODE_RETENTION ({retention_s:g}s) must be 0 (keep every node's record) "
            f"or at least {shortest:g}s (60s, and ten CLUSTERSYNC_NODE_DEAD_AFTER); the default "
            f"is {DEFAULTS['CLUSTERSYNC_NODE_RETENTION']:g}s (a day)."
        )
    return retention_s


def store_url(settings: BaseSettings) -> tuple[str, bool]:
    """The node's way to its job: (CLUSTERSYNC_REDIS_URL, False) or (CLUSTERSYNC_URL, True);
    ConfigError unless exactly one of the two is set, or if the one set is no URL of its kind."""
    redis_url = str(settings.get("CLUSTERSYNC_REDIS_URL") or "")
    serve_url = str(settings.get("CLUSTERSYNC_URL") or "")
    if redis_url and serve_url:
        raise ConfigError(
            "CLUSTERSYNC_REDIS_URL and CLUSTERSYNC_URL are both set: a node reaches its job "
            "either through Redis (CLUSTERSYNC_REDIS_URL) or through `clustersync serve` "
            "(CLUSTERSYNC_URL, with CLUSTERSYNC_TOKEN), not both; unset one of them.")
    if not serve_url:
        if not redis_url:
            raise ConfigError(
                "neither CLUSTERSYNC_REDIS_URL nor CLUSTERSYNC_URL is set. Point every node at "
                'the same Redis, e.g. CLUSTERSYNC_REDIS_URL = "redis://:password@10.0.0.5:6379/0"'
                ', or a node that cannot reach Redis at `clustersync serve`, e.g. '
                'CLUSTERSYNC_URL = "https://10.0.0.5:8500" with CLUSTERSYNC_TOKEN.')
        return validate_redis_url(redis_url), False
    parts = urlsplit(serve_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"CLUSTERSYNC_URL {redact_url(serve_url)!r} is no http(s) URL of `clustersync "
            'serve`; e.g. CLUSTERSYNC_URL = "https://10.0.0.5:8500".')
    return serve_url.rstrip("/"), True


def validate_redis_url(url: str, given_as: str = "CLUSTERSYNC_REDIS_URL") -> str:
    """Return ``url`` if it is a Redis URL this package can use, else raise ConfigError.

    ``given_as`` is what the error calls the value: the setting, or the CLI's option.
    """
    if not url:
        raise ConfigError(
            f"{given_as} is not set. Point every node at the same Redis, e.g. "
            'CLUSTERSYNC_REDIS_URL = "redis://:password@10.0.0.5:6379/0".'
        )
    try:
        check_url(url, given_as)  # the forms: redis_urls.py
    except UrlError as exc:
        raise ConfigError(str(exc)) from None
    return url


def validate_politeness(mode: object) -> str:
    """``CLUSTERSYNC_POLITENESS``: "cluster" or "node"; raise ConfigError otherwise."""
    if mode not in POLITENESS_MODES:
        raise ConfigError(
            f"CLUSTERSYNC_POLITENESS = {mode!r} is not a politeness mode; accepted: 'cluster' "
            "(default: one DOWNLOAD_DELAY budget per site for the whole cluster) or 'node' "
            "(Scrapy's own: each node keeps the delay on its own).")
    return str(mode)


def validate_recrawl(mode: str) -> str:
    """Return ``mode`` if it is a ``CLUSTERSYNC_RECRAWL`` value, else raise ConfigError."""
    if mode not in RECRAWL_MODES:
        raise ConfigError(
            f"CLUSTERSYNC_RECRAWL = {mode!r} is not a recrawl mode; accepted: '' (default: a "
            "finished job stays finished), 'keep-seen' (crawl it again, only URLs not seen "
            "before) or 'forget-seen' (crawl every URL again)."
        )
    return mode


def _whole_number_in(settings: BaseSettings, name: str, low: int, high: int) -> int | None:
    """Setting ``name`` as a whole number from ``low`` to ``high``; None if it is not one."""
    raw = settings.get(name, DEFAULTS[name])
    try:
        value = int(raw)
        if value == float(raw) and low <= value <= high:
            return value
    except (TypeError, ValueError):
        pass
    return None


def validate_failed_keep(settings: BaseSettings) -> int:
    """``CLUSTERSYNC_FAILED_KEEP``: a whole number from 0 (keep none) to FAILED_KEEP_MAX."""
    value = _whole_number_in(settings, "CLUSTERSYNC_FAILED_KEEP", 0, FAILED_KEEP_MAX)
    if value is not None:
        return value
    raw = settings.get("CLUSTERSYNC_FAILED_KEEP", DEFAULTS["CLUSTERSYNC_FAILED_KEEP"])
    raise ConfigError(
        f"CLUSTERSYNC_FAILED_KEEP = {raw!r} is not a number of failed requests to keep: give a "
        f"whole number from 0 (keep none) to {FAILED_KEEP_MAX:,}; the default is 1000."
    )


def validate_settings_history(settings: BaseSettings) -> int:
    """``CLUSTERSYNC_SETTINGS_HISTORY``: a whole number from 1 to SETTINGS_HISTORY_MAX."""
    value = _whole_number_in(settings, "CLUSTERSYNC_SETTINGS_HISTORY", 1, SETTINGS_HISTORY_MAX)
    if value is not None:
        return value
    raw = settings.get("CLUSTERSYNC_SETTINGS_HISTORY", DEFAULTS["CLUSTERSYNC_SETTINGS_HISTORY"])
    raise ConfigError(
        f"CLUSTERSYNC_SETTINGS_HISTORY = {raw!r} is not a number of shared settings changes to "
        f"keep: give a whole number from 1 to {SETTINGS_HISTORY_MAX:,}; the default is 1000."
    )


def validate_job_name(job: str, given_as: str = "CLUSTERSYNC_JOB") -> str:
    """Return ``job`` if it can name a job (and its keys' hash tag), else raise ConfigError."""
    if not JOB_NAME_RE.match(job or ""):
        raise ConfigError(
            f"{given_as} {job!r} is not a valid job name: use 1-200 characters of "
            "letters, digits, '_', '.', ':' or '-', starting with a letter or digit."
        )
    return job


def redact_url(url: str) -> str:
    """The URL with every secret it carries (the userinfo password, a ``?password=`` or any
    other credential in its query) replaced by ``***``, for logs and errors (url_secrets.py)."""
    return _redact_url(url)


def make_node_id() -> str:
    """A node id unique in the cluster and readable by a person: host, pid and a random tail."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _number(
    settings: BaseSettings,
    name: str,
    kind: type[_Number],
    minimum: float | None = None,
    maximum: float | None = None,
) -> _Number:
    raw = settings.get(name, DEFAULTS[name])
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name} = {raw!r} is not a {'whole number' if kind is int else 'number'}."
        ) from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} = {raw!r} is too small: it must be at least {minimum}.")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} = {raw!r} is too large: it must be at most {maximum}.")
    return value
