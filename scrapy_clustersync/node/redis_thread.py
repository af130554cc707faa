"""SyncWorker: the one thread that talks to Redis for a node, so the reactor never waits on it.

The reactor side (the scheduler) reaches it only through ``RedisThread``: it submits ops
(pushes, acks, dead letters, releases) and takes leased entries. The thread flushes the ops in
order, in batches (one script call each), leases new work ahead of need and sends the
heartbeat. When Redis is away it keeps every op,
stops leasing, retries the same call (same call id, so nothing is applied twice) with backoff,
and logs the outage and the recovery once each.

Two faults are not outages and are never retried as they are:
- A batch Redis refuses for what it holds (a malformed op) is split until the op is found;
  that op goes to the job's dead letters with the reason, the rest is applied in order.
- Redis came back older than the node saw it (RolledBack). Acks of requests whose children
  may be among the lost writes become releases (the requests are crawled again), and the
  scheduler forgets which fingerprints it sent (``rollbacks`` changes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..config import ClusterConfig, redact_url
from ..store import JobStore, Op, StateLost, StoreError, StoreUnavailable
from ..store.errors import BadBatch, RolledBack
from ..store.job_store import new_call_id
from ..store.script_results import DeadNode, Heartbeat
from ..store.write_ops import StartDone
from .prefetch import Prefetch
from .thread_api import FINISHED, STATE_LOST, StartState, Undelivered
from .write_stream import WriteStream

logger = logging.getLogger(__name__)

MIN_SLEEP_S = 0.001
MAX_SLEEP_S = 0.5
EMPTY_QUEUE_BACKOFF_MAX_S = 1.0
OUTAGE_BACKOFF_MAX_S = 5.0
ERROR_BACKOFF_S = 1.0
CLOSE_TIMEOUT_S = 15.0


class SyncWorker:
    """The node's Redis thread (see the module doc); its reactor side is ``RedisThread``.

    State shared with the reactor thread is private and crosses threads only in ways that are
    atomic in CPython: deque append/popleft, the assignment of a whole value.
    """

    def __init__(
        self,
        store: JobStore,
        config: ClusterConfig,
        epoch: str,
        node_info: Callable[[], dict[str, Any]],
        on_leased: Callable[[], None],
        start_state: str = "none",
    ) -> None:
        self.store = store
        self.config = config
        self.epoch = epoch
        self._node_info = node_info
        self._on_leased = on_leased
        #: what Redis did with this node's writes; only the Redis thread adds to it
        self._totals = {"pushed": 0, "filtered": 0, "released": 0, "set_aside": 0}
        self._writes = WriteStream(config.batch_size, wake=self._wake_up)
        #: leased entries: the Redis thread adds, the reactor takes (lease more once this few
        #: wait: both sides use the one policy)
        self._prefetched = Prefetch(config.prefetch // 2, wake=self._wake_up)
        self._held: set[str] = set()  # lease ids of this node, owned by the Redis thread
        #: releases of the entries a rejoin dropped, until Redis has them: no lease before
        #: (it could take one of them again, and the release would then hand it back)
        self._releasing: set[str] = set()
        self._node_idle = False  # set by the reactor thread
        self._leasing_held = False  # set by the reactor thread: the job is paused or stopping
        #: bumped by the reactor thread whenever the node does something; a node that worked
        #: since its last heartbeat starts its idle time again
        self._activity = 0
        self._activity_at_beat = 0
        #: ``_activity`` when a heartbeat last reported the node idle (None: it reported busy)
        self._idle_reported_at: int | None = None
        self._start_state = StartState(start_state)
        #: set by the reactor thread every few tenths of a second: a reactor stuck (a callback
        #: that blocks) for half a lease stops the heartbeat, so that the node's leases run out
        #: and other nodes crawl them, as if the node were dead
        self._reactor_tick = time.monotonic()
        self._rollbacks = 0
        #: ``_activity`` as it was when a heartbeat answered "finished"; None while not finished
        self._finished_at: int | None = None
        self._state_lost: str | None = None
        #: declared_ms of the last death of this node a heartbeat told it of (0: none)
        self._death_told = 0
        #: the last heartbeat's answer: the cluster as Redis saw it then (None before the first)
        self._cluster: Heartbeat | None = None
        self._away_since: float | None = None
        self._pending_lease: tuple[str, int, int] | None = None  # call id, count, pushes covered
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._next_heartbeat = 0.0
        self._next_lease = 0.0
        self._empty_backoff_s = 0.0
        self._outage_tries = 0
        self._errors_logged: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="clustersync-io", daemon=True)

    # ---- reactor-thread side (RedisThread) -----------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, op: Op) -> None:
        self._writes.submit(op)

    def take(self) -> tuple[str, bytes] | None:
        """The next leased entry; one a later push of this node outranks is handed back (see
        prefetch.py), behind that push, so the next lease has the push first."""
        return self._prefetched.take(self._writes.recent_pushes, self._writes.pushes_settled)

    def await_lease(self, timeout_s: float) -> None:
        self._prefetched.wait(
            self._writes.pushes_submitted, timeout_s,
            give_up=lambda: self._away_since is not None or self._state_lost is not None)

    @property
    def waiting(self) -> int:
        return len(self._prefetched)

    @property
    def buffered_pushes(self) -> int:
        return self._writes.pushes_waiting

    @property
    def pushes_unleased(self) -> int:
        return self._writes.pushes_submitted - self._prefetched.covered

    @property
    def accepting_work(self) -> bool:
        return self._backlog <= self.config.buffer_limit

    def mark_busy(self) -> None:
        self._node_idle = False
        self._activity += 1

    def mark_idle(self) -> None:
        self._node_idle = True
        self._wake.set()

    def hold_leasing(self, held: bool) -> None:
        self._leasing_held = held
        self._wake.set()

    def reactor_alive(self) -> None:
        self._reactor_tick = time.monotonic()

    @property
    def outcome(self) -> str | None:
        """``finished`` holds only while the node has done nothing since the heartbeat that
        answered it: a request scheduled after that snapshot (a spider_idle handler's, a
        timer's) is not in Redis yet, so the node runs on and crawls it."""
        if self._state_lost is not None:
            return STATE_LOST
        finished = self._finished_at is not None and self._finished_at == self._activity
        return FINISHED if finished and self._node_idle else None

    @property
    def rollbacks(self) -> int:
        return self._rollbacks

    @property
    def start_state(self) -> StartState:
        return self._start_state

    def start_done(self) -> None:
        self.submit(StartDone())
        self._start_state = StartState("done", self._rollbacks)

    @property
    def cluster(self) -> Heartbeat | None:
        return self._cluster

    @property
    def finish_note(self) -> str:
        beat = self._cluster
        nodes = beat.live_nodes if beat is not None else 0
        return (f"queue empty, no lease out, start() done, {nodes} live node(s) idle for "
                f"{self.config.idle_close_after_s:g}s")

    def totals(self) -> dict[str, int]:
        return {**self._totals, "outranked": self._prefetched.outranked}

    def figures(self) -> dict[str, Any]:
        """What the node record shows of this thread (see nodeinfo.py): leases held (under way
        or prefetched), prefetched, writes buffered."""
        return {"leased": len(self._held), "prefetched": len(self._prefetched),
                "buffered": self._backlog}

    def close(self, unacked: list[str]) -> Undelivered:
        self._stop.set()
        self._wake.set()
        # the thread first: a lease call under way would add to ``_prefetched`` after a release
        self._thread.join(CLOSE_TIMEOUT_S)
        reachable = not (self._thread.is_alive() or self._state_lost or self._away_since)
        if reachable and self._pending_lease is not None:
            self._guard(self._lease)  # learn what a call whose answer was lost leased
        prefetched = self._prefetched.returned() + self._prefetched.drain()
        self._writes.release(prefetched)
        self._writes.release(unacked)
        writes = self._backlog
        if reachable:
            self._flush_and_leave()
        undelivered = self._undelivered()
        logger.info(
            "clustersync: node %s leaves job %r: %d leased requests handed back to the queue "
            "(%d under way, %d prefetched), %d writes sent, %d kept for later",
            self.config.node_id, self.config.job, len(unacked) + len(prefetched), len(unacked),
            len(prefetched), writes - len(undelivered), len(undelivered))
        return undelivered

    def _flush_and_leave(self) -> None:
        """Send every buffered write (for CLOSE_TIMEOUT_S at most), then leave the job."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while self._backlog and time.monotonic() < deadline and not self._state_lost:
            if not self._step_safely(closing=True):
                time.sleep(0.2)
        if not self._backlog and not self._state_lost:
            self._guard(lambda: self._send_heartbeat(leaving=True))

    # ---- shared helpers ------------------------------------------------------------------
    @property
    def _backlog(self) -> int:
        """Ops not yet in Redis, including a batch whose call is under way or being retried."""
        return len(self._writes)

    def _wake_up(self) -> None:
        self._wake.set()

    @property
    def _quiet(self) -> bool:
        """Nothing buffered, prefetched or held: the node owes Redis nothing."""
        return not (self._backlog or self._prefetched or self._held)

    def _undelivered(self) -> Undelivered:
        return self._writes.undelivered(self.store.writes_seen or 0)

    # ---- worker thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the step, so a wake-up during it is not lost
            busy = self._step_safely(closing=False)
            if self._state_lost:
                return
            if self._away_since is not None:
                # backoff that new ops do not cut short
                self._stop.wait(min(OUTAGE_BACKOFF_MAX_S, 0.25 * 2 ** min(5, self._outage_tries)))
            elif not busy:
                self._wake.wait(self._sleep_s())

    def _sleep_s(self) -> float:
        """Until the next thing due: a heartbeat, a lingering batch, a lease retry."""
        now = time.monotonic()
        due = [self._next_heartbeat]
        linger = self._writes.linger_until(now)
        if linger is not None:
            due.append(linger)
        if self._lease_wanted():
            due.append(self._next_lease)
        return min(MAX_SLEEP_S, max(MIN_SLEEP_S, min(due) - now))

    def _step_safely(self, closing: bool) -> bool:
        return bool(self._guard(lambda: self._step(closing)))

    def _guard(self, action: Callable[[], Any]) -> Any:
        """Run ``action``; every failure becomes the node's reaction to it, never a dead thread."""
        try:
            result = action()
        except StoreUnavailable as exc:
            self._went_away(exc)
            return False
        except StateLost as exc:
            self._lost(exc)
            return False
        except RolledBack as exc:
            self._rolled_back(exc)
            return False
        except StoreError as exc:
            self._log_once(logging.ERROR, f"clustersync: Redis refused a call: {exc}; retrying")
            self._stop.wait(ERROR_BACKOFF_S)
            return False
        except Exception as exc:  # a bug must not end the thread: the node would hang
            self._log_once(logging.ERROR, f"clustersync: unexpected error in the Redis thread: "
                           f"{exc!r}; retrying", exc_info=True)
            self._stop.wait(ERROR_BACKOFF_S)
            return False
        self._came_back()
        return result

    def _log_once(self, level: int, message: str, exc_info: bool = False) -> None:
        if message not in self._errors_logged:
            self._errors_logged.add(message)
            logger.log(level, message, exc_info=exc_info)

    def _step(self, closing: bool) -> bool:
        now = time.monotonic()
        busy = False
        if now >= self._next_heartbeat and not closing:
            self._beat(now)
        # entries the reactor handed back, outranked, go back to the queue before the next
        # lease (which would pass them over); a node with nothing left to crawl starves: its
        # new work must reach Redis now
        returned = self._prefetched.returned()
        self._writes.release(returned)
        if self._writes.due(now, urgent=closing or bool(returned) or not self._prefetched):
            self._flush()
            busy = True
        if not closing and self._turned_idle():
            self._beat(now)  # the job may be finished now: say so without waiting an interval
        if not closing and self._lease_due(now):
            busy = self._lease() or busy
        if not closing:  # bloom-prepare: next Bloom layer ahead of need, one chunk per step
            busy = self.store.prepare_bloom(self.epoch) or busy
        return busy

    def _flush(self) -> None:
        call_id, batch = self._writes.batch()
        try:
            result = self.store.flush(self.epoch, batch, call_id)
        except BadBatch as exc:
            self._set_aside(exc)
            return
        settled = self._writes.confirmed()
        self._held.difference_update(settled)
        self._releasing.difference_update(settled)
        if result.pushed:
            self._next_lease = 0.0
            self._empty_backoff_s = 0.0
        self._totals["pushed"] += result.pushed
        self._totals["filtered"] += result.filtered
        self._totals["released"] += result.released

    def _set_aside(self, exc: BadBatch) -> None:
        """Find the op Redis refused by halving the batch; dead-letter it, keep the order."""
        op = self._writes.refused()
        if op is None:
            return
        self._totals["set_aside"] += 1
        self._releasing.discard(op.settles or "")
        logger.error(
            "clustersync: Redis refused a write of job %r (%s); it is moved to the job's dead "
            "letters (`clustersync dead %s`) and the crawl goes on. Write: %s",
            self.config.job, exc, self.config.job, op.describe(),
        )
        self._writes.set_aside(op, str(exc))

    def _lease_due(self, now: float) -> bool:
        awaited = self._prefetched.awaited(self._writes.pushes_settled)  # the reactor waits
        return (now >= self._next_lease or awaited) and self._lease_wanted()

    def _lease_wanted(self) -> bool:
        if self._state_lost or not self.accepting_work or self._leasing_held or self._releasing:
            return False  # back-pressure, the job is paused or stopping, a rejoin's releases
        return len(self._prefetched) <= self._prefetched.low_water

    def _lease(self) -> bool:
        if self._pending_lease is None:
            self._pending_lease = (new_call_id(), self.config.prefetch - len(self._prefetched),
                                   self._writes.pushes_settled)
        call_id, count, covered = self._pending_lease
        lease_ms = int(self.config.lease_timeout_s * 1000)
        entries = self.store.lease(self.epoch, count, lease_ms, call_id)
        self._pending_lease = None
        was_empty = not self._prefetched
        self._held.update(entry.entry_id for entry in entries)
        self._prefetched.add(entries, covered)
        if not entries:
            backoff_s = self._empty_backoff_s * 2 or 0.05
            self._empty_backoff_s = min(EMPTY_QUEUE_BACKOFF_MAX_S, backoff_s)
            self._next_lease = time.monotonic() + self._empty_backoff_s
            return False
        self._empty_backoff_s = 0.0
        if was_empty:
            self._on_leased()
        return True

    def _turned_idle(self) -> bool:
        """Idle and quiet, and no heartbeat said so since the node last did something."""
        return self._node_idle and self._quiet and self._idle_reported_at != self._activity

    def _beat(self, now: float) -> None:
        """Send the heartbeat; the next one is due in an interval, or sooner when the job is
        finished then if nothing changes (a node that just turned idle has settled)."""
        self._next_heartbeat = now + self.config.heartbeat_interval_s
        wait_ms = self._send_heartbeat(leaving=False)
        if wait_ms > 0:
            self._next_heartbeat = min(self._next_heartbeat, now + wait_ms / 1000)

    def _send_heartbeat(self, leaving: bool) -> int:
        """Send the heartbeat; returns its ``finish_wait_ms`` (-1 if none was sent)."""
        if not leaving and self._reactor_stuck():
            return -1
        # activity first: anything the reactor does after this read voids a "finished" answer
        # (see ``outcome``); anything before it shows as busy_since_last or as writes buffered
        activity = self._activity
        idle = self._node_idle and self._quiet
        beat = self.store.heartbeat(
            self.epoch,
            ttl_ms=0 if leaving else int(self.config.node_dead_after_s * 1000),
            lease_ms=int(self.config.lease_timeout_s * 1000),
            info=self._node_info() | self.figures()
            | {"state": "closed" if leaving else self._state(idle)},
            idle=idle,
            idle_after_ms=int(self.config.idle_close_after_s * 1000),
            lease_ids=sorted(self._held),
            busy_since_last=activity != self._activity_at_beat,
            # after an outage, nodes retry up to OUTAGE_BACKOFF_MAX_S apart: none is dead for it
            grace_ms=int((OUTAGE_BACKOFF_MAX_S + self.config.heartbeat_interval_s) * 1000),
            # a gap of two heartbeats: a live node's heartbeats come one interval apart
            gap_ms=int(min(self.config.node_dead_after_s,
                           2 * self.config.heartbeat_interval_s) * 1000),
            told_ms=self._death_told,
        )
        for node, leases in beat.declared_dead:
            logger.warning(
                "clustersync: node %s sent no heartbeat for %gs (CLUSTERSYNC_NODE_DEAD_AFTER): "
                "declared dead; its %d leased requests are back in the queue", node,
                self.config.node_dead_after_s, leases)
        death = beat.my_death
        if death is not None and death.declared_ms != self._death_told:
            self._death_told = death.declared_ms
            if not leaving:  # (a leaving node holds nothing more)
                self._rejoin(death, beat.server_ms)
        self._activity_at_beat = activity
        self._cluster = beat
        self._idle_reported_at = activity if idle else None
        self._start_state = StartState(beat.start, self._rollbacks)
        if not leaving:
            self._finished_at = activity if beat.finished and idle else None
        return beat.finish_wait_ms

    def _rejoin(self, death: DeadNode, now_ms: int) -> None:
        """Another node declared this one dead (it stood still or was cut off): its leases went
        back to the queue then. Drop the prefetched entries (they are queued again; releasing
        those leased since changes nothing for the others; nothing is leased before those
        releases are in Redis, or a lease could take one again and its release hand it
        back while the node holds it), let the requests under way finish:
        their acks remove them from the queue or from another node's lease, counted once. The
        heartbeat that told it already made the node live again."""
        dropped = self._prefetched.drop_all()
        self._releasing.update(dropped)
        self._writes.release(dropped)
        logger.warning(
            "clustersync: node %s was declared dead by node %s %.1fs ago (no heartbeat for "
            "%gs: the process stood still or lost its network) and %d of its leases went back "
            "to the queue; it drops its %d prefetched requests, lets the %d under way finish "
            "and rejoins the job", self.config.node_id, death.by,
            max(0, now_ms - death.declared_ms) / 1000, self.config.node_dead_after_s,
            death.leases_returned, len(dropped), max(0, len(self._held) - len(dropped)))

    def _reactor_stuck(self) -> bool:
        stuck_s = time.monotonic() - self._reactor_tick
        if stuck_s < self.config.lease_timeout_s / 2:
            return False
        self._log_once(logging.WARNING, "clustersync: this node's reactor has not run for half "
                       "a lease (a callback or pipeline that blocks?); the node stops renewing its "
                       "leases, so other nodes crawl them if it stays stuck")
        return True

    def _state(self, idle: bool) -> str:
        """The node's state in its record: starting (nothing done yet), crawling, idle, paused
        (the job is paused or stopping: it starts nothing new), disconnected (Redis away);
        "closed" is sent by a node that leaves, and ``status`` shows "dead" for a node
        declared dead."""
        if self._away_since is not None:
            return "disconnected"
        if self._leasing_held:
            return "paused"
        if idle:
            return "idle"
        return "starting" if self._activity == 0 and not self._held else "crawling"

    def _went_away(self, exc: Exception) -> None:
        self._outage_tries += 1
        if self._away_since is None:
            self._away_since = time.monotonic()
            self._prefetched.wake_waiters()  # a reactor waiting for a lease waits no more
            logger.warning(
                "clustersync: Redis at %s is unreachable (%s). This node keeps running, leases "
                "no new work and buffers its writes until Redis is back.",
                redact_url(self.config.redis_url), exc,
            )

    def _came_back(self) -> None:
        if self._away_since is None:
            return
        logger.warning(
            "clustersync: Redis is reachable again after %.1fs; %d buffered writes are being sent.",
            time.monotonic() - self._away_since, self._backlog,
        )
        self._away_since = None
        self._outage_tries = 0
        self._next_heartbeat = 0.0

    def _rolled_back(self, exc: Exception) -> None:
        """Redis lost writes it had confirmed: forget what this node believed stored.

        The requests this node has under way may have had children among the lost writes, so
        their acks become releases and they are crawled again; the scheduler forgets which
        fingerprints it sent (they may be gone), so redelivered parents queue their children
        anew. Entry ids never repeat (see flush.lua), so no late op touches another request.
        """
        self._rollbacks += 1
        not_started = set(self._prefetched.entry_ids())
        voided = self._writes.void(self._held - not_started)
        self._next_heartbeat = 0.0
        logger.critical(
            "clustersync: Redis at %s came back older than this node saw it (%s): it restarted "
            "from an older snapshot or failed over to a replica that lagged. Writes it had "
            "confirmed are gone; this node hands back the %d requests it has under way (they "
            "are crawled again) and sends their links anew. Run Redis with appendonly yes and "
            "appendfsync always to avoid this.",
            redact_url(self.config.redis_url), exc, voided,
        )

    def _lost(self, exc: Exception) -> None:
        if self._state_lost is None:
            self._state_lost = str(exc)
            self._prefetched.wake_waiters()
            logger.critical(
                "clustersync: job %r is gone from Redis at %s (%s). Redis restarted without "
                "persistence, or the job was purged. This node stops instead of re-crawling "
                "everything; enable Redis persistence (appendonly yes) and re-seed the job.",
                self.config.job, redact_url(self.config.redis_url), exc,
            )
