"""A node joining its job: the join itself (``join_job``: Redis unreachable or refusing, a
finished job, a restart asked by CLUSTERSYNC_RECRAWL), then what it checks (``warn_of_risks``):
a Redis the delivery guarantee does not hold on, and its own dedup settings against the job's.
``open_node`` does it all, and replays the spool, on the node's Redis thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..config import ClusterConfig, redact_url
from ..plugin.settings_in_force import declared_live_keys
from ..plugin.stop_reasons import (
    JOB_FINISHED,
    JOB_PARTITIONS_DIFFER,
    JOB_STOPPED,
    JOB_UNREADABLE,
    REDIS_AUTH_REFUSED,
    REDIS_UNREACHABLE,
)
from ..store import JobStore, StoreError
from ..store.control_state import STOPPED, STOPPING, ControlState
from ..store.errors import AccessRefused, JobUnreadable
from ..store.job_store import job_partitions_in
from ..store.join_scripts import HELD
from ..store.script_results import FinishedRun, Joined
from ..store.shared_settings import SharedSettings, SharedSettingsStore
from .liveness import StartUpLiveness
from .thread_api import NodeOpened

if TYPE_CHECKING:
    from .spool import Spool

logger = logging.getLogger(__name__)

MIN_REDIS_VERSION = (7, 0)


def open_node(store: JobStore, config: ClusterConfig, spool: Spool,
              spider_cls: type | None = None) -> NodeOpened | str:
    """Join the job, warn of risks, record the live keys ``spider_cls`` declares
    (settings_in_force.declared_live_keys), read the shared settings (so the first request
    uses them) and replay the spool (see spool.py), on the node's Redis thread; returns what
    the node joined as, or the reason it must stop with (``join_job``)."""
    alive = StartUpLiveness(store, config)
    controlled: list[str] = []
    joined = join_job(store, config, alive, controlled)
    if isinstance(joined, str):
        return joined
    warn_of_risks(store, config)
    shared = read_shared_settings(store, config, declared_live_keys(spider_cls))
    try:
        replayed = spool.replay(joined.epoch, store.as_node, keep_alive=alive.renew)
    except Exception:  # a spool that cannot be read must not keep the node from its job
        logger.exception("clustersync: the spool of job %r could not be replayed; its files "
                         "are kept for the next node", config.job)
        replayed = 0
    return NodeOpened(joined.epoch, joined.runs_start, replayed, call_s=alive.call_s,
                      control=controlled[0] if controlled else None, settings=shared)


def read_shared_settings(store: JobStore, config: ClusterConfig,
                         declared: Mapping[str, str]) -> SharedSettings | None:
    """Declare the spider's live keys and read the job's shared settings; None if Redis did
    not answer (the Redis thread reads them in its first turns then). Never raises."""
    settings = SharedSettingsStore(store.client, store.keys)
    try:
        settings.declare_keys(declared)
        return settings.read()
    except StoreError as exc:
        logger.warning("clustersync: could not read the shared settings of job %r (%s); this "
                       "node reads them again as soon as it can", config.job, exc)
        return None


def warn_of_risks(store: JobStore, config: ClusterConfig) -> None:
    """Log a warning for each way this Redis or this node's settings could hurt the crawl.

    Never raises: the node has joined; these are worth a warning, not a stop.
    """
    if store.dedup != config.dedup:
        logger.warning(
            "clustersync: job %r was created with dedup settings %s; this node's settings "
            "(%s) are ignored so that every node records fingerprints the same way.",
            config.job, store.dedup, config.dedup,
        )
    try:
        version, policy = store.server_facts()
    except StoreError:
        return
    url = redact_url(config.redis_url)
    if version and version < MIN_REDIS_VERSION:
        logger.warning(
            "clustersync: Redis at %s is version %s; clustersync needs %s or newer and is "
            "not tested on older versions.", url, ".".join(map(str, version)),
            ".".join(map(str, MIN_REDIS_VERSION)),
        )
    if policy and policy != "noeviction":
        logger.warning(
            "clustersync: Redis at %s evicts keys when full (maxmemory-policy %s): it may "
            "delete the job's queue or record, which loses requests. Use a Redis with "
            "maxmemory-policy noeviction for crawls.", url, policy,
        )


def join_job(
    store: JobStore, config: ClusterConfig, liveness: StartUpLiveness | None = None,
    controlled: list[str] | None = None,
) -> Joined | str:
    """Join the job as a node; returns what the join answered, or, with one ERROR line logged,
    the reason the node must stop with (stop_reasons.py): Redis unreachable or refusing this
    client, the job stopped by ``clustersync stop`` (it is not joined: the node holds nothing
    and claims no start()), or the job finished (unless ``CLUSTERSYNC_RECRAWL`` restarts it).
    A paused job is joined: the node waits (the control extension says so). The join's
    liveness covers the node's start-up (liveness.py; ``liveness`` keeps it). The control
    state read before the join is appended to ``controlled``, if given (the node follows the
    state from it)."""
    liveness = liveness or StartUpLiveness(store, config)
    url = redact_url(config.redis_url)
    try:
        joined = _join_unless_stopped(store, config, liveness, controlled)
        if isinstance(joined, str):
            return joined
    except AccessRefused as exc:
        logger.error(
            "clustersync: Redis at %s refused this node (%s): check the user and password in "
            "CLUSTERSYNC_REDIS_URL (redis://USER:PASSWORD@host:port/db) and that the user may "
            "run scripts on the job's keys (clustersync:*).", url, exc)
        return REDIS_AUTH_REFUSED
    except JobUnreadable as exc:
        logger.error("clustersync: cannot join job %r at %s: %s.", config.job, url, exc)
        return JOB_UNREADABLE
    except StoreError as exc:
        logger.error(
            "clustersync: cannot join job %r at %s: %s. Check CLUSTERSYNC_REDIS_URL and that "
            "Redis is running and reachable from this machine.", config.job, url, exc)
        return REDIS_UNREACHABLE
    if joined.finished is not None:
        _log_finished(config.job, joined.finished, held=joined.restarted == HELD)
        return JOB_FINISHED
    if joined.restarted:
        logger.info("clustersync: job %r had finished; CLUSTERSYNC_RECRAWL = %r restarts it: "
                    "start() runs again on this node%s", config.job, joined.restarted,
                    " and every URL is crawled again (the seen record was cleared)"
                    if joined.restarted == "forget-seen" else
                    " and only URLs not seen before are crawled (and start requests marked "
                    "dont_filter)")
    return joined


def _join_unless_stopped(store: JobStore, config: ClusterConfig, liveness: StartUpLiveness,
                         controlled: list[str] | None) -> Joined | str:
    store.connect()  # the handshake is not part of the round trip the allowance counts
    asked = time.monotonic()
    trip = store.round_trip()  # the control state and the job's partition count: one round trip
    control_read = store.control.read_in(trip)
    partitions_read = job_partitions_in(trip, store.client, config.job)
    trip.send()
    control, partitions = control_read.result(), partitions_read.result()
    if config.partitions_given and config.partitions > 1 and partitions == 1:
        partitions = store.record_partitions(config.partitions)  # a new job gets the count
    if partitions_refused(config, partitions):
        return JOB_PARTITIONS_DIFFER
    if controlled is not None:
        controlled.append(control.state)
    # the join is the node's first heartbeat: its deadline covers the start-up
    ttl_ms = liveness.measured(time.monotonic() - asked)
    logger.debug("clustersync: node %s joins with a start-up liveness of %d ms",
                 config.node_id, ttl_ms)
    if control.state in (STOPPING, STOPPED):
        _log_stopped(config.job, control)
        return JOB_STOPPED
    return store.join_node(ttl_ms, recrawl=config.recrawl)


#: the partition counts this version crawls (docs/architecture.md, "Where this stands")
CRAWLED_PARTITIONS = 1


def partitions_refused(config: ClusterConfig, partitions: int) -> bool:
    """True, with one ERROR line logged, if the node must not join a job split into
    ``partitions`` partitions: its CLUSTERSYNC_PARTITIONS says another count (the sites, their
    queues and dedup records would be looked for under other hash tags), or, when it leaves
    the setting unset and follows the job's count, a count this version does not crawl. The
    count is the job's, recorded in partition 0's meta when the job was created."""
    if config.partitions_given and partitions != config.partitions:
        logger.error(
            "clustersync: job %r is split into %d partition(s), but this node's "
            "CLUSTERSYNC_PARTITIONS is %d; this node stops. The count is the job's, fixed when "
            "it was created: set CLUSTERSYNC_PARTITIONS = %d, or leave it unset to follow the "
            "job.", config.job, partitions, config.partitions, partitions)
        return True
    if partitions != CRAWLED_PARTITIONS:
        logger.error(
            "clustersync: job %r is split into %d partitions, which this version cannot crawl "
            "(it crawls jobs of one partition); this node stops.", config.job, partitions)
        return True
    return False


def _log_finished(job: str, run: FinishedRun, held: bool = False) -> None:
    if held:
        _log_held(job)
        return
    at = datetime.fromtimestamp(run.at_ms / 1000, tz=timezone.utc)
    logger.error(
        "clustersync: job %r already finished at %s (%d requests done; %s); this node stops. "
        "To crawl it again: `clustersync restart %s` (only URLs not seen before, and start "
        "requests marked dont_filter; add "
        "--forget-seen to crawl every URL again), or set CLUSTERSYNC_RECRAWL = \"keep-seen\" "
        "or \"forget-seen\" for runs that restart it themselves.",
        job, at.strftime("%Y-%m-%d %H:%M:%S UTC"), run.pages, run.why(), job)


def _log_held(job: str) -> None:
    logger.error(
        "clustersync: job %r has finished, but nodes are still open on it (kept open by a "
        "DontCloseSpider?); CLUSTERSYNC_RECRAWL = \"forget-seen\" restarts it only once no node "
        "is left, as those nodes remember the URLs they sent and would skip them. This node "
        "stops: close those nodes first, or use \"keep-seen\" (only URLs not seen before).", job)


def _log_stopped(job: str, control: ControlState) -> None:
    at = datetime.fromtimestamp(control.since_ms / 1000, tz=timezone.utc)
    logger.error(
        "clustersync: job %r was stopped at %s (`clustersync stop`); this node stops. Its queue "
        "is kept: `clustersync resume %s` lets the next `scrapy crawl` continue it.",
        job, at.strftime("%Y-%m-%d %H:%M:%S UTC"), job)
