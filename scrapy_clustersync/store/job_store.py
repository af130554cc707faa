"""JobStore: every Redis operation of one job, each one script call or one read pipeline."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis

from ..config import DedupSettings
from .bloom_layout import MIGRATE_BATCH, BloomParams, set_limit
from .bloom_prepare import BloomPreparer
from .control_state import ControlChange, ControlState, ControlStore
from .dedup import (
    bloom_chunks_of,
    bloom_refusal,
    dedup_status,
    describe_layers,
    job_mode_for,
    setting_of,
)
from .errors import BadBatch, RolledBack, StoreError, translate_errors
from .keys import JobKeys
from .records import DeadLetter, FormatError, format_node_record, parse_node_record
from .records import as_bytes as _raw
from .records import as_text as _text
from .script_results import (
    DeadNode,
    FinishedRun,
    FlushResult,
    Heartbeat,
    JobStatus,
    Joined,
    Leased,
    Restarted,
    parse_declared,
)
from .write_ops import Op

DEAD_LETTERS_KEPT = 10_000
#: failed requests kept by default (CLUSTERSYNC_FAILED_KEEP)
FAILED_KEPT = 1000
RECLAIM_PER_LEASE = 200
#: tries at forgetting the seen record while its Bloom filter changes (it does not, with no node)
FORGET_TRIES = 5
CALL_ID_BYTES = 8


def _load_lua(name: str, *helpers: str) -> str:
    """The script ``lua/<name>.lua``, after ``lua/prelude.lua`` and the other ``helpers``."""
    scripts = resources.files("scrapy_clustersync.store").joinpath("lua")
    parts = ["prelude", *helpers, name]
    return "".join(scripts.joinpath(f"{part}.lua").read_text() for part in parts)


def new_call_id() -> str:
    return uuid.uuid4().hex[: CALL_ID_BYTES * 2]


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
    ) -> None:
        self.client = client
        #: how many failed requests the job keeps (CLUSTERSYNC_FAILED_KEEP)
        self.failed_keep = failed_keep
        self.keys = JobKeys(job)
        self.node_id = node_id
        #: The node's write counter as the last answer from Redis gave it (every script of the
        #: node bumps it). A script that finds a lower value raises RolledBack: Redis lost writes
        #: it had confirmed. None: no check (the CLI, which writes without keeping state).
        self.writes_seen = writes_seen
        #: the caller's dedup settings until join() reads the job's own
        self.dedup = dedup or DedupSettings()
        #: the dedup mode the job stores (see store/dedup.py); join() reads it
        self.job_dedup = job_mode_for(self.dedup.mode)
        self._bloom_layers_described = 1
        self._bloom_in_use = False  # the job's filter has a layer in use, as last seen
        self._exact_entries = 0  # the job's exact set, as last seen
        self._flush = client.register_script(_load_lua("flush", "bloom", "tasks"))
        self._migrate = client.register_script(_load_lua("dedup_migrate", "bloom"))
        self._lease = client.register_script(_load_lua("lease", "tasks"))
        self._heartbeat = client.register_script(_load_lua("heartbeat"))
        self._join = client.register_script(_load_lua("join"))
        self._restart = client.register_script(_load_lua("restart"))
        self.control = ControlStore(client, self.keys,
                                    client.register_script(_load_lua("control")))
        self._bloom_prep = BloomPreparer(
            client.register_script(_load_lua("bloom_prepare")), self.keys, client)

    def as_node(self, node_id: str, writes_seen: int) -> JobStore:
        """This job's store acting as node ``node_id`` (the spool replays a node's writes)."""
        store = JobStore(self.client, self.keys.job, node_id, self.dedup, writes_seen=writes_seen,
                         failed_keep=self.failed_keep)
        store.job_dedup = self.job_dedup
        return store

    def ping(self) -> None:
        with translate_errors(self.client):
            self.client.ping()

    def server_facts(self) -> tuple[tuple[int, ...], str]:
        """The server's version, e.g. (7, 0, 15), and its maxmemory policy ("" if unsaid)."""
        with translate_errors(self.client):
            server = self.client.info("server")
            memory = self.client.info("memory")
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
        """
        k, d = self.keys, self.dedup
        for _ in range(FORGET_TRIES):
            dedup_keys, layout = self._dedup_record() if recrawl == "forget-seen" else ([], [])
            with translate_errors(self.client):
                epoch, claimed, mode, capacity, error, *finish, restarted = self._join(
                    keys=[k.meta, k.nodes, k.queue, k.deadlines, *dedup_keys],
                    args=[self.node_id, uuid.uuid4().hex, ttl_ms, int(claim),
                          job_mode_for(d.mode), d.bloom_capacity, repr(d.bloom_error_rate),
                          recrawl, *layout],
                )
            if _text(restarted) != "retry":
                break
        else:
            raise StoreError(f"the seen record of job {k.job!r} kept changing while it was "
                             "being forgotten; is a node still writing to it?")
        self.job_dedup = _text(mode)
        self.dedup = DedupSettings(setting_of(self.job_dedup), int(capacity), float(_text(error)))
        if self.job_dedup == "bloom":  # an older version's job: its filter from the first URL
            self._bloom_prep.observe(self._bloom_params(), 0, 0)
        finished = None
        if _text(finish[0]):
            finished = FinishedRun(*(int(_text(x) or 0) for x in finish))
        return Joined(_text(epoch), bool(int(claimed)), finished, _text(restarted))

    def restart(self, force: bool = False, forget_seen: bool = False) -> Restarted:
        """Make the job crawlable again: start() runs again on the next node (see restart.lua).

        Refused (``Restarted.done`` False) for a job that does not exist, or, unless ``force``,
        one with live nodes or work queued or leased. The seen record is kept unless
        ``forget_seen``: then it is deleted in the same step.
        """
        k = self.keys
        for _ in range(FORGET_TRIES):
            dedup_keys, layout = self._dedup_record() if forget_seen else ([], [])
            with translate_errors(self.client):
                done, live, queued, leased = (int(x) for x in self._restart(
                    keys=[k.meta, k.nodes, k.queue, k.deadlines, *dedup_keys],
                    args=[int(force), int(forget_seen), *layout]))
            if done >= 0:
                return Restarted(bool(done), live, queued, leased)
        raise StoreError(f"the seen record of job {k.job!r} kept changing while it was being "
                         "forgotten; is a node still writing to it?")

    def _dedup_record(self) -> tuple[list[str], list[str]]:
        """The keys of the job's dedup record (exact set, bloom hash, the Bloom chunks it names)
        and the bloom hash as read (field, value pairs), which a script checks is unchanged."""
        k = self.keys
        with translate_errors(self.client):
            bloom = {_text(name): _text(value)
                     for name, value in self.client.hgetall(k.bloom).items()}
        names = [k.seen, k.bloom]
        for name, value in bloom.items():
            names.extend(bloom_chunks_of(k, name, value))
        return names, [x for pair in bloom.items() for x in pair]

    def ensure_job(self) -> str:
        """The job's epoch, creating the job if it is new (used by the CLI's seed)."""
        return self.join(ttl_ms=0, claim=False)[0]

    def flush(self, epoch: str, ops: Sequence[Op], call_id: str) -> FlushResult:
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
                keys, args = self._flush_call(epoch, ops, call_id)
            except (TypeError, ValueError, OverflowError) as exc:
                raise BadBatch(f"a write cannot be encoded for Redis ({exc})") from None
            try:
                raw = self._run(self._flush, keys, args)
            except UnicodeEncodeError as exc:  # redis-py encodes text when it sends: never sent
                raise BadBatch(f"a write cannot be encoded for Redis ({exc})") from None
            except StoreError as exc:
                prepared = self._grow_bloom_for_batch(epoch, exc, prepared)
                continue
            *figures, writes = (int(x) for x in _text(raw).split())
            self._saw_writes(writes)
            result = FlushResult(*figures)
            self._observe_dedup(result.bloom_layers, result.bloom_active_entries,
                                result.exact_entries)
            return result

    def _observe_dedup(self, layers: int, active_entries: int, exact_entries: int) -> None:
        """Learn the dedup record's state from a script's answer."""
        self._bloom_layers_described = max(1, layers)
        self._bloom_in_use, self._exact_entries = layers > 0, exact_entries
        if self.dedup.mode == "bloom":
            staged = exact_entries if self.job_dedup != "bloom" else None
            self._bloom_prep.observe(self._bloom_params(), layers, active_entries, staged)

    def _run(self, script: Any, keys: list[Any], args: list[Any]) -> Any:
        """Call ``script``; a RolledBack answer resets the counter to what Redis holds."""
        try:
            with translate_errors(self.client):
                return script(keys=keys, args=args)
        except RolledBack as exc:
            found = str(exc).split("CLUSTERSYNC_ROLLED_BACK", 1)[1].split()[0]
            self.writes_seen = int(found)  # start counting again from what Redis holds
            raise

    def _expected_writes(self) -> int:
        return -1 if self.writes_seen is None else self.writes_seen

    def _saw_writes(self, writes: int) -> None:
        if self.writes_seen is not None:
            self.writes_seen = max(self.writes_seen, writes)

    def _grow_bloom_for_batch(self, epoch: str, exc: StoreError, prepared: int) -> int:
        """Describe or allocate the layer the refused batch needs; re-raise any other error.

        Returns the highest layer allocated for the batch so far.
        """
        name, number = bloom_refusal(exc)
        if name == "CLUSTERSYNC_BLOOM_LAYOUT" and number > self._bloom_layers_described:
            self._bloom_layers_described = number  # the filter grew: describe more layers
            return prepared
        if name == "CLUSTERSYNC_BLOOM_NOT_READY" and number > prepared:
            self._bloom_prep.prepare(epoch, self._bloom_params(), number)
            return number
        raise exc

    def prepare_bloom(self, epoch: str) -> bool:
        """One bounded step of the Bloom filter's upkeep, if one is due; True if more remain.

        Meant for the node's Redis thread between other calls. Either allocates one chunk of
        the next layer (about 1/32 of it), so that a layer is ready before a batch needs it
        (once the active layer is PREPARE_AT_FILL full, or the exact set of a new job is, see
        bloom.py); or, once the filter is in use, moves up to MIGRATE_BATCH fingerprints of
        the job's exact set into it. Makes no Redis call at all when nothing is due. Never
        needed for correctness: a flush allocates what it needs itself, and checks the set and
        the filter both while the set is not empty.
        """
        if self.dedup.mode != "bloom":
            return False
        if self._bloom_prep.step(epoch, self._bloom_params()):
            return True
        if not (self._bloom_in_use and self._exact_entries):
            return False
        return self._migrate_step(epoch)

    def _migrate_step(self, epoch: str) -> bool:
        """One dedup_migrate.lua call; True if the exact set still holds fingerprints."""
        prepared = -1
        while True:
            chunk_keys, layout = describe_layers(
                self._bloom_params(), self._bloom_layers_described, self.keys)
            k = self.keys
            try:
                with translate_errors(self.client):
                    raw = self._migrate(keys=[k.meta, k.seen, k.bloom, *chunk_keys],
                                        args=[epoch, MIGRATE_BATCH, *layout])
            except StoreError as exc:
                prepared = self._grow_bloom_for_batch(epoch, exc, prepared)
                continue
            _, left, layers, entries = (int(x) for x in _text(raw).split())
            self._observe_dedup(layers, entries, left)
            return left > 0

    def _flush_call(
        self, epoch: str, ops: Sequence[Op], call_id: str
    ) -> tuple[list[str], list[Any]]:
        k = self.keys
        keys = [k.meta, k.queue, k.entries, k.deadlines, k.leased, k.seen, k.stats, k.dead,
                k.last_call(self.node_id), k.bloom, k.failed, k.tasks, k.task_of,
                k.scrapy_stats, k.node_stats]
        args: list[Any] = [epoch, call_id, self.node_id, DEAD_LETTERS_KEPT, self.job_dedup,
                           self._expected_writes()]
        if self.dedup.mode == "bloom":
            params = self._bloom_params()
            chunk_keys, layout = describe_layers(params, self._bloom_layers_described, k)
            keys.extend(chunk_keys)
            count, *layouts = layout  # ARGV: set limit, layers described, failed_max, layouts
            args.extend([set_limit(params), count, self.failed_keep, *layouts])
        else:
            args.extend([0, 0, self.failed_keep])
        for op in ops:
            args.extend(op.args())
        return keys, args

    def _bloom_params(self) -> BloomParams:
        return BloomParams(self.dedup.bloom_capacity, self.dedup.bloom_error_rate)

    def lease(self, epoch: str, count: int, lease_ms: int, call_id: str) -> list[Leased]:
        """Lease up to ``count`` entries, in the queue's order."""
        k = self.keys
        writes, *flat = self._run(
            self._lease,
            [k.meta, k.queue, k.entries, k.deadlines, k.leased, k.stats, k.last_call(self.node_id),
             k.tasks, k.task_of],
            [epoch, call_id, self.node_id, count, lease_ms, RECLAIM_PER_LEASE,
             self._expected_writes()],
        )
        self._saw_writes(int(writes))
        return [Leased(_text(flat[i]), _raw(flat[i + 1]), -float(flat[i + 2]))
                for i in range(0, len(flat), 3)]

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
        take_start: bool = False,
        grace_ms: int = 0,
        told_ms: int = 0,
        gap_ms: int = 0,
    ) -> Heartbeat:
        """Keep the node alive for ``ttl_ms`` (its NODE_DEAD_AFTER; 0: it leaves), renew
        leases, declare dead the nodes whose liveness ran out (their leases back in the queue:
        ``Heartbeat.declared_dead``), learn if all is done.

        ``busy_since_last``: the node worked since its last heartbeat, so an idle node's idle
        time starts now. ``take_start``: the node takes the start() claim over if its holder
        is gone (``Heartbeat.start == "mine"`` then); every node asks for it. ``grace_ms``:
        after a gap with no heartbeat from any node (Redis was away) the nodes alive before it
        get that long more before they can be declared dead; ``gap_ms``: how long such a gap
        must be (0: ``ttl_ms``; the worker passes two heartbeat intervals, so that an outage
        shorter than ``ttl_ms`` that still lets a node's deadline pass is pardoned too).
        ``Heartbeat.my_death`` is set if
        another node had declared this one dead: it is live again now, and answered the same
        record until a heartbeat passes its ``declared_ms`` as ``told_ms``.
        """
        k = self.keys
        idle_flag = (2 if busy_since_last else 1) if idle else 0
        args: list[Any] = [epoch, self.node_id, ttl_ms, lease_ms, format_node_record(info),
                           idle_flag, idle_after_ms, self._expected_writes(), int(take_start),
                           grace_ms, told_ms, gap_ms, *lease_ids]
        (finished, queued, leased, live, now_ms, writes, start, wait_ms, done, declared,
         my_death) = self._run(
            self._heartbeat,
            [k.meta, k.nodes, k.node_info, k.idle, k.deadlines, k.leased, k.queue,
             k.last_call(self.node_id), k.stats, k.dead_nodes],
            args,
        )
        self._saw_writes(int(writes))
        return Heartbeat(bool(finished), int(queued), int(leased), int(live), int(now_ms),
                         _text(start), int(wait_ms), int(done), parse_declared(_text(declared)),
                         DeadNode.parse(self.node_id, my_death) if _text(my_death) else None)

    def set_control(self, action: str) -> ControlChange:
        """Pause, resume or stop the job for every node, or settle a stop (see control.lua)."""
        return self.control.change(action)

    def control_state(self) -> ControlState:
        """The job's control state: running, paused, stopping or stopped (one read)."""
        return self.control.read()

    def status(self) -> JobStatus:
        k = self.keys
        with translate_errors(self.client):
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(k.meta)
            pipe.zcard(k.queue)
            pipe.zcard(k.deadlines)
            pipe.scard(k.seen)
            pipe.hgetall(k.stats)
            pipe.llen(k.dead)
            pipe.zrange(k.nodes, 0, -1, withscores=True)
            pipe.hgetall(k.node_info)
            pipe.hgetall(k.idle)
            pipe.hgetall(k.bloom)
            pipe.hgetall(k.dead_nodes)
            pipe.time()
            pipe.hgetall(k.scrapy_stats)
            pipe.hgetall(k.node_stats)
            (meta, queued, leased, seen, stats, dead, live, info, idle, bloom, deaths, now,
             summed, per_node) = pipe.execute()
        server_ms = int(now[0]) * 1000 + int(now[1]) // 1000
        alive = {_text(n): score >= server_ms for n, score in live}
        idle_since = {_text(n): int(v) for n, v in idle.items()}
        node_stats = stats_by_node(per_node)
        # a node back from the dead is live again (listed dead until its next heartbeat)
        dead_nodes = sorted((DeadNode.parse(_text(n), v) for n, v in deaths.items()
                             if not alive.get(_text(n))), key=lambda d: (d.declared_ms, d.node))
        declared = {d.node for d in dead_nodes}
        nodes = []
        for raw_id, raw_info in sorted(info.items()):
            node = _text(raw_id)
            record = parse_node_record(raw_info)
            record.update(id=node, alive=alive.get(node, False), idle=node in idle_since,
                          stats=node_stats.get(node, {}))
            if node in declared:
                record["state"] = "dead"
            nodes.append(record)
        meta_t = {_text(a): _text(b) for a, b in meta.items()}
        dedup = dedup_status(meta_t, {_text(a): _text(b) for a, b in bloom.items()}, int(seen))
        return JobStatus(
            job=self.keys.job, exists=bool(meta_t), queued=int(queued), leased=int(leased),
            seen=int(dedup["entries"]), dead_letters=int(dead),
            counters={_text(a): int(b) for a, b in stats.items()},
            start_claimed_by=meta_t.get("start_claim"), start_done="start_done" in meta_t,
            server_ms=server_ms, nodes=nodes, dedup=dedup, meta=meta_t, dead_nodes=dead_nodes,
            scrapy_stats={_text(a): int(b) for a, b in summed.items()},
        )

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
        """Delete every key of the job; returns how many keys existed."""
        k = self.keys
        with translate_errors(self.client):
            nodes = [_text(n) for n in self.client.hkeys(k.node_info)]
            names = k.shared_keys() + [k.last_call(n) for n in nodes + ["cli"]]
            names.extend(self._dedup_record()[0])
            # UNLINK: a huge queue or Bloom layer is freed in the background, not in the call
            return int(self.client.unlink(*dict.fromkeys(names)))


def stats_by_node(flat: dict[Any, Any]) -> dict[str, dict[str, int]]:
    """The ``node_stats`` hash ("<node>\t<stat>" -> int) as node -> stat -> int."""
    nodes: dict[str, dict[str, int]] = {}
    for key, value in flat.items():
        node, _, name = _text(key).partition("\t")
        nodes.setdefault(node, {})[name] = int(value)
    return nodes
