"""JobStore: every Redis operation of one job, as one node (or the CLI) sees it.

A facade: each script call is made by the class of its script (flush_script.py, lease_script.py,
heartbeat_script.py, join_scripts.py, control_state.py, and dedup_upkeep.py for the Bloom
filter's upkeep), which builds its KEYS and ARGV and parses its reply. What JobStore keeps is
the node's state across calls: its write counter (``writes_seen``) and its dedup settings.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from ..config import DedupSettings
from .closespider_script import CloseSpiderStore
from .cluster_client import node_of
from .control_state import ControlChange, ControlState, ControlStore
from .dedup import bloom_refusal
from .dedup_upkeep import DedupUpkeep
from .errors import RolledBack, StoreError, translate_errors
from .flush_script import RESULTS_MAX, FlushScript
from .heartbeat_script import Beat, HeartbeatScript
from .job_status import read_status
from .join_scripts import RETRY, DedupRecord, JoinRequest, JoinScript, RestartScript
from .keys import PARTITIONS_FIELD, JobKeys, parse_partitions
from .lease_script import DEFAULT_HORIZON_MS, LeasePace, LeaseScript
from .partition_count import PartitionsScript
from .records import DeadLetter, FormatError, format_node_record
from .records import as_text as _text
from .round_trip import Answer, RoundTrip
from .script_base import JobScript, new_call_id, rolled_back_counter
from .script_results import (
    FlushResult,
    Heartbeat,
    JobStatus,
    Joined,
    LeaseBatch,
    Restarted,
)
from .site_scripts import SiteStore
from .write_ops import Op, PackedPushes

__all__ = ["FAILED_KEPT", "JobStore", "beat_of", "job_partitions", "new_call_id"]

#: failed requests kept by default (CLUSTERSYNC_FAILED_KEEP)
FAILED_KEPT = 1000
#: tries at forgetting the seen record while its Bloom filter changes (it does not, with no node)
FORGET_TRIES = 5

T = TypeVar("T")


#: how long a node's call record stays once the node will send nothing more (prelude.lua)
CALL_RECORD_KEEP_MS = 86_400_000


def beat_of(*, ttl_ms: int, lease_ms: int, info: dict[str, Any], idle: bool, idle_after_ms: int,
            lease_ids: Sequence[str], busy_since_last: bool = False, grace_ms: int = 0,
            told_ms: int = 0, gap_ms: int = 0, retention_ms: int = 0) -> Beat:
    """What a heartbeat says, from ``JobStore.heartbeat``'s arguments (its doc has them)."""
    idle_flag = (2 if busy_since_last else 1) if idle else 0
    return Beat(ttl_ms, lease_ms, format_node_record(info), idle_flag, idle_after_ms, grace_ms,
                told_ms, gap_ms, lease_ids, retention_ms)


def job_partitions(client: redis.Redis, job: str) -> int:
    """How many partitions ``job`` is split into: partition 0's meta field ``partitions``,
    recorded when the job was created (absent, as for a job that does not exist or was made
    by an earlier version: 1). One HGET. Raises StoreError for a value that is no count."""
    with translate_errors(client):
        raw = client.hget(JobKeys(job).meta, PARTITIONS_FIELD)
    return _partitions_of(job, raw)


def job_partitions_in(trip: RoundTrip, client: redis.Redis, job: str) -> Answer[int]:
    """``job_partitions`` in ``trip`` (round_trip.py): one HGET more in its pipeline."""
    return trip.add(lambda pipe: pipe.hget(JobKeys(job).meta, PARTITIONS_FIELD),
                    Answer(client, lambda raw: _partitions_of(job, raw),
                           lambda: job_partitions(client, job)))


def _partitions_of(job: str, raw: Any) -> int:
    try:
        return parse_partitions(raw)
    except ValueError as exc:
        raise StoreError(f"job {job!r}: {exc}") from None


def join_partitions(store: JobStore, count: int) -> list[tuple[JobStore, str]]:
    """Join partitions 1..``count``-1 of ``store``'s job (``store``: partition 0's, joined),
    all in one round trip (a cluster client's pipeline: one per primary); returns each one's
    store and epoch, partition 1 first (none for a job of one partition)."""
    stores = [store.of_partition(p) for p in range(1, count)]
    if not stores:
        return []
    trip = store.round_trip()
    answers = [each.join_partition_in(trip) for each in stores]
    trip.send()
    return [(each, answer.result()) for each, answer in zip(stores, answers, strict=True)]


#: keys one UNLINK of ``purge`` names at most
PURGE_BATCH = 10_000


class JobStore:
    """The Redis side of one job, as seen by one node (or by the CLI, with ``node_id="cli"``)."""

    def __init__(
        self,
        client: redis.Redis,
        job: str,
        node_id: str,
        dedup: DedupSettings | None = None,
        writes_seen: int | None = 0,
        failed_keep: int = FAILED_KEPT,
        results_max: int = RESULTS_MAX,
        partition: int = 0,
    ) -> None:
        self.client = client
        #: how many failed requests the job keeps (CLUSTERSYNC_FAILED_KEEP)
        self.failed_keep = failed_keep
        #: the keys of the job's partition this store calls (0: the job of one partition, and
        #: the partition that holds the job-wide state of a split one)
        self.keys = JobKeys(job, partition)
        self.node_id = node_id
        #: The node's write counter as the last answer from Redis gave it (every script of the
        #: node bumps it). A script that finds a lower value raises RolledBack: Redis lost writes
        #: it had confirmed. None: no check (the CLI, which writes without keeping state).
        self.writes_seen = writes_seen
        self._dedup = DedupUpkeep(client, self.keys, dedup or DedupSettings())
        #: the most entries of the job's results stream (CLUSTERSYNC_RESULTS_MAX)
        self.results_max = results_max
        self._flush = FlushScript(client, self.keys, node_id, failed_keep, results_max)
        self._lease = LeaseScript(client, self.keys, node_id)
        self._heartbeat = HeartbeatScript(client, self.keys, node_id)
        self._join = JoinScript(client, self.keys)
        self._restart = RestartScript(client, self.keys)
        self.control = ControlStore(client, self.keys)
        #: the site scripts: one politeness budget per site for the cluster
        self.sites = SiteStore(client, self.keys, node_id)
        self.closespider = CloseSpiderStore(client, self.keys, node_id)
        self._partitions = PartitionsScript(client, self.keys)

    @property
    def dedup(self) -> DedupSettings:
        """The caller's dedup settings until join() adopts the job's own."""
        return self._dedup.settings

    def as_node(self, node_id: str, writes_seen: int) -> JobStore:
        """This job's store acting as node ``node_id`` (the spool replays a node's writes)."""
        store = JobStore(self.client, self.keys.job, node_id, self.dedup, writes_seen=writes_seen,
                         failed_keep=self.failed_keep, results_max=self.results_max)
        store._dedup.adopt(self._dedup.job_mode, self.dedup)
        return store

    def of_partition(self, partition: int) -> JobStore:
        """The store of partition ``partition`` of the same job, as the same node: its own
        write counter (the partition is a job of its own for the scripts) and this store's
        dedup settings (the job's, once join() adopted them)."""
        store = JobStore(self.client, self.keys.job, self.node_id, self.dedup,
                         writes_seen=None if self.writes_seen is None else 0,
                         failed_keep=self.failed_keep, results_max=self.results_max,
                         partition=partition)
        store._dedup.adopt(self._dedup.job_mode, self.dedup)
        return store

    def join_partition_in(self, trip: RoundTrip) -> Answer[str]:
        """Join this partition in ``trip`` as a partition other than 0 is joined: created with
        the job's dedup settings if new, no liveness (the node's heartbeat goes to partition
        0), no start() claim. Answers the partition's own epoch."""
        ask = JoinRequest(self.node_id, uuid.uuid4().hex, 0, False, self._dedup.job_mode,
                          self.dedup, "join")
        keys, args = self._join.call(ask, DedupRecord())

        def parse(reply: Any) -> str:
            joined, job_mode, settings = self._join.parse(reply)
            self._dedup.adopt(job_mode, settings)
            return joined.epoch

        return self._add(trip, self._join, keys, args, Answer(
            self.client, parse, lambda: self._join.run(ask, DedupRecord())[0].epoch))

    def retire_calls(self) -> None:
        """This node will send nothing more (its spool was replayed): its call record may
        expire, a day from now, as the leaving heartbeat lets it (prelude.lua bump_writes)."""
        with translate_errors(self.client):
            self.client.pexpire(self.keys.last_call(self.node_id), CALL_RECORD_KEEP_MS)

    def ping(self) -> None:
        with translate_errors(self.client):
            self.client.ping()

    def connect(self) -> None:
        """Open a pooled connection now (TCP, TLS, HELLO with AUTH, a health check: several
        round trips far from Redis), so that the next call times one round trip, not the
        handshake."""
        with translate_errors(self.client):
            pool = node_of(self.client, self.keys.meta).connection_pool
            pool.release(pool.get_connection())

    def server_facts(self) -> tuple[tuple[int, ...], str]:
        """The server's version, e.g. (7, 0, 15), and its maxmemory policy ("" if unsaid)."""
        with translate_errors(self.client):
            server_of_job = node_of(self.client, self.keys.meta)  # a cluster: the job's primary
            try:  # one round trip (Redis 7 takes several sections)
                server = memory = server_of_job.info("server", "memory")
            except redis.ResponseError:
                server, memory = server_of_job.info("server"), server_of_job.info("memory")
        version = str(server.get("redis_version", ""))
        policy = str(memory.get("maxmemory_policy", ""))
        return tuple(int(part) for part in version.split(".") if part.isdigit()), policy

    def join(self, ttl_ms: int, claim: bool = True) -> tuple[str, bool]:
        """Join the job (creating it if new) and adopt its dedup settings.

        Returns the job's epoch and whether this node must run the spider's start(). A job that
        finished is joined all the same here (see ``join_node``).
        """
        joined = self.join_node(ttl_ms, claim, recrawl="join")
        return joined.epoch, joined.runs_start

    def join_node(self, ttl_ms: int, claim: bool = True, recrawl: str = "") -> Joined:
        """Join the job (creating it if new) and adopt its dedup settings (see join.lua).

        A job whose last run finished, with nothing queued or leased, is not joined when
        ``recrawl`` is "" (``Joined.finished`` says when and how it ended); with "keep-seen" or
        "forget-seen" this call restarts it (``Joined.restarted``) and the node runs start();
        "forget-seen" also deletes the seen record in the same step; "join" joins it as it is.
        Raises StoreError for a job whose stored dedup mode this version does not read.
        """
        ask = JoinRequest(self.node_id, uuid.uuid4().hex, ttl_ms, claim, self._dedup.job_mode,
                          self.dedup, recrawl)
        for _ in range(FORGET_TRIES):
            record = self._dedup_record() if recrawl == "forget-seen" else DedupRecord()
            joined, job_mode, settings = self._join.run(ask, record)
            if joined.restarted != RETRY:
                self._dedup.adopt(job_mode, settings)
                return joined
        raise self._forget_failed()

    def restart(self, force: bool = False, forget_seen: bool = False) -> Restarted:
        """Make the job crawlable again: start() runs again on the next node (see restart.lua).

        Refused (``Restarted.done`` False) for a job that does not exist, or, unless ``force``,
        one with live nodes or work queued or leased. The seen record is kept unless
        ``forget_seen``: then it is deleted in the same step.
        """
        for _ in range(FORGET_TRIES):
            restarted = self._restart.run(force, self._dedup_record() if forget_seen else None)
            if restarted is not None:
                return restarted
        raise self._forget_failed()

    def _dedup_record(self) -> DedupRecord:
        return DedupRecord.read(self.client, self.keys)

    def _forget_failed(self) -> StoreError:
        return StoreError(f"the seen record of job {self.keys.job!r} kept changing while it was "
                          "being forgotten; is a node still writing to it?")

    def record_partitions(self, count: int) -> int:
        """Record ``count`` (2 or more) as the job's partition count if the job is new (no
        epoch, no count: see partitions.lua); returns the job's count, which differs from
        ``count`` when the job was created with another (``job_partitions`` reads it)."""
        return self._partitions.run(count)

    def ensure_job(self) -> str:
        """The job's epoch, creating the job if it is new (used by the CLI's seed)."""
        return self.join(ttl_ms=0, claim=False)[0]

    def flush(self, epoch: str, ops: Sequence[Op] | PackedPushes, call_id: str) -> FlushResult:
        """Apply ``ops`` in order, atomically; running the same ``call_id`` twice is a no-op.

        Raises BadBatch, before any change, if an op is malformed or cannot be encoded;
        RolledBack if Redis lost writes it had confirmed to this node; StateLost if the job is
        gone.
        A batch that may need a Bloom layer not yet allocated is refused by the script before
        any change; the layer is then allocated here, one chunk per call, and the batch sent
        again.
        """
        prepared = -1  # the highest layer allocated for this batch: each retry makes progress
        while True:
            try:
                result = self._counted(lambda writes_seen: self._flush.run(
                    epoch, call_id, writes_seen, self._dedup.flush_dedup(), ops))
            except StoreError as exc:  # a Bloom refusal; any other error is raised again
                prepared = self._dedup.grow_for_batch(epoch, exc, prepared)
                continue
            self._dedup.observe(result.bloom_layers, result.bloom_active_entries,
                                result.exact_entries)
            return result

    def prepare_bloom(self, epoch: str) -> bool:
        """One bounded step of the Bloom filter's upkeep, if one is due; True if more remain.

        Meant for the node's Redis thread between other calls. Either allocates one chunk of
        the next layer (about 1/32 of it), so that a layer is ready before a batch needs it
        (once the active layer is PREPARE_AT_FILL full, or the exact set of a new job is, see
        bloom_layout.py); or, once the filter is in use, moves up to MIGRATE_BATCH fingerprints
        of the job's exact set into it. Makes no Redis call at all when nothing is due. Never
        needed for correctness: a flush allocates what it needs itself, and checks the set and
        the filter both while the set is not empty.
        """
        return self._dedup.step(epoch)

    def _counted(self, call: Callable[[int], tuple[T, int]]) -> T:
        """``call(writes_seen)``'s answer; the write counter it returns is remembered, and a
        RolledBack answer resets the counter to what Redis holds."""
        try:
            answered = call(self._writes_arg())
        except RolledBack as exc:
            self._failed(exc)
            raise
        return self._count(answered)

    def _writes_arg(self) -> int:
        """The write counter a script checks (-1: no check)."""
        return -1 if self.writes_seen is None else self.writes_seen

    def _count(self, answered: tuple[T, int]) -> T:
        """A script's answer; the write counter it came with is remembered."""
        answer, writes = answered
        if self.writes_seen is not None:
            self.writes_seen = max(self.writes_seen, writes)
        return answer

    def _failed(self, exc: StoreError) -> None:
        if isinstance(exc, RolledBack):
            self.writes_seen = rolled_back_counter(exc)  # count again from what Redis holds

    # ---- the same calls in a round trip (round_trip.py) --------------------------------------
    def round_trip(self) -> RoundTrip:
        """A round trip to fill with ``*_in`` calls and send: they cost one round trip."""
        return RoundTrip(self.client)

    def flush_in(self, trip: RoundTrip, epoch: str, ops: Sequence[Op],
                 call_id: str) -> Answer[FlushResult]:
        """``flush`` in ``trip``; raises BadBatch at once for an op that cannot be encoded."""
        keys, args = self._flush.encoded_call(epoch, call_id, self._writes_arg(),
                                              self._dedup.flush_dedup(), ops)

        def parse(reply: Any) -> FlushResult:
            result = self._count(self._flush.parse(reply))
            self._dedup.observe(result.bloom_layers, result.bloom_active_entries,
                                result.exact_entries)
            return result

        return self._add(trip, self._flush, keys, args, Answer(
            self.client, parse, lambda: self.flush(epoch, ops, call_id),
            again_if=lambda error: bool(bloom_refusal(error)[0]), failed=self._failed))

    def lease_in(self, trip: RoundTrip, epoch: str, count: int, lease_ms: int,
                 call_id: str, horizon_ms: int = DEFAULT_HORIZON_MS,
                 foreign: bool = True) -> Answer[LeaseBatch]:
        """``lease`` in ``trip``."""
        keys, args = self._lease.call(epoch, call_id, count, lease_ms, self._writes_arg(),
                                      horizon_ms, foreign)
        return self._add(trip, self._lease, keys, args, Answer(
            self.client, lambda reply: self._count(self._lease.parse(reply)),
            lambda: self.lease(epoch, count, lease_ms, call_id, horizon_ms, foreign),
            failed=self._failed))

    def set_lease_pace(self, pace: LeasePace) -> None:
        """Serve each site's requests no faster than ``pace`` says (lease_script.py)."""
        self._lease.set_pace(pace)

    def set_region(self, region: str) -> None:
        """This node's region (CLUSTERSYNC_REGION): the sites pinned to it, and those pinned
        to none, are leased to it first (lua/frontier.lua)."""
        self._lease.region = region

    def heartbeat_in(self, trip: RoundTrip, epoch: str, beat: Beat) -> Answer[Heartbeat]:
        """``heartbeat`` in ``trip`` (``beat``: ``beat_of``'s)."""
        keys, args = self._heartbeat.call(epoch, beat, self._writes_arg())
        return self._add(trip, self._heartbeat, keys, args, Answer(
            self.client, lambda reply: self._count(self._heartbeat.parse(reply)),
            lambda: self._count_beat(epoch, beat), failed=self._failed))

    @staticmethod
    def _add(trip: RoundTrip, script: JobScript, keys: list[str], args: list[Any],
             answer: Answer[T]) -> Answer[T]:
        return trip.add(lambda pipe: script.queue(pipe, keys, args), answer, ran=script.sent)

    def lease(self, epoch: str, count: int, lease_ms: int, call_id: str,
              horizon_ms: int = DEFAULT_HORIZON_MS, foreign: bool = True) -> LeaseBatch:
        """Lease up to ``count`` entries: the best queue class first, its sites in turn, each
        no faster than the lease pace lets it start within ``horizon_ms``; the sites of the
        node's region and of none first, those of other regions only when these give nothing
        and ``foreign`` (the node has nothing to do)."""
        return self._counted(lambda writes_seen: self._lease.run(
            epoch, call_id, count, lease_ms, writes_seen, horizon_ms, foreign))

    def heartbeat(
        self,
        epoch: str,
        *,
        ttl_ms: int,
        lease_ms: int,
        info: dict[str, Any],
        idle: bool,
        idle_after_ms: int,
        lease_ids: Sequence[str],
        busy_since_last: bool = False,
        grace_ms: int = 0,
        told_ms: int = 0,
        gap_ms: int = 0,
        retention_ms: int = 0,
    ) -> Heartbeat:
        """Keep the node alive for ``ttl_ms`` (its NODE_DEAD_AFTER; 0: it leaves), renew
        leases, declare dead the nodes whose liveness ran out (their leases back in the queue:
        ``Heartbeat.declared_dead``), take the start() claim over if its holder is gone
        (``Heartbeat.start == "mine"`` then), learn if all is done.

        ``busy_since_last``: the node worked since its last heartbeat, so an idle node's idle
        time starts now. ``grace_ms``: after a gap with no heartbeat from any node (Redis was
        away) the nodes alive before it get that long more before they can be declared dead;
        ``gap_ms``: how long such a gap must be (0: ``ttl_ms``; the worker passes two heartbeat
        intervals, so that an outage shorter than ``ttl_ms`` that still lets a node's deadline
        pass is pardoned too). ``Heartbeat.my_death`` is set if another node had declared this
        one dead: it is live again now, and answered the same record until a heartbeat passes
        its ``declared_ms`` as ``told_ms``. ``retention_ms``: the records of nodes that left or
        died longer ago than that are pruned, a few per call (0: never).
        """
        return self._count_beat(epoch, beat_of(
            ttl_ms=ttl_ms, lease_ms=lease_ms, info=info, idle=idle, idle_after_ms=idle_after_ms,
            lease_ids=lease_ids, busy_since_last=busy_since_last, grace_ms=grace_ms,
            told_ms=told_ms, gap_ms=gap_ms, retention_ms=retention_ms))

    def _count_beat(self, epoch: str, beat: Beat) -> Heartbeat:
        return self._counted(lambda writes_seen: self._heartbeat.run(epoch, beat, writes_seen))

    def set_control(self, action: str) -> ControlChange:
        """Pause, resume or stop the job for every node, or settle a stop (see control.lua)."""
        return self.control.change(action)

    def control_state(self) -> ControlState:
        """The job's control state: running, paused, stopping or stopped (one read)."""
        return self.control.read()

    def status(self) -> JobStatus:
        """Everything ``clustersync status`` shows of the job, read in one pipeline."""
        return read_status(self.client, self.keys)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The job's ``limit`` newest dead letters, newest first.

        Raises StoreError if an item of the dead list is not a dead letter (another program
        wrote it).
        """
        with translate_errors(self.client):
            raw = self.client.lrange(self.keys.dead, 0, limit - 1)
        try:
            return [DeadLetter.parse(record) for record in raw]
        except FormatError as exc:
            raise StoreError(f"the dead list of job {self.keys.job!r} holds {exc}") from None

    def purge(self) -> int:
        """Delete every key of the job, of each of its partitions; returns how many keys
        existed."""
        with translate_errors(self.client):
            nodes = [_text(n) for n in self.client.hkeys(self.keys.node_info)]
            count = job_partitions(self.client, self.keys.job)
            # partition 0 last: it holds the partition count, so a purge cut short is resumed
            return sum(self._purge_partition(k, nodes)
                       for k in reversed(self.keys.partitions(count)))

    def _purge_partition(self, k: JobKeys, nodes: list[str]) -> int:
        """Delete every key of one partition (``nodes``: the job's node ids); how many existed."""
        names = k.shared_keys() + [k.last_call(n) for n in nodes + ["cli"]]
        # the call records of nodes whose records were pruned, kept while they may write
        names.extend(_text(name) for name in
                     self.client.scan_iter(match=k.last_call("*"), count=1000))
        names.extend(DedupRecord.read(self.client, k).keys)
        for site in map(_text, self.client.zrange(k.sites, 0, -1)):
            names.extend((k.site(site), k.site_inflight(site)))
        # the frontier's lists and sets, and the politeness hashes its leases wrote
        for prefix in (k.frontier, k.site_prefix):
            names.extend(_text(name) for name in
                         self.client.scan_iter(match=prefix + "*", count=1000))
        # UNLINK: a huge queue or Bloom layer is freed in the background, not in the call;
        # a broad crawl's many site lists go a batch of names per command
        unique = list(dict.fromkeys(names))
        return sum(int(self.client.unlink(*unique[i:i + PURGE_BATCH]))
                   for i in range(0, len(unique), PURGE_BATCH))
