"""SyncWorker: the one thread that talks to Redis for a node, so the reactor never waits on it.

The reactor thread only appends to ``ops`` (pushes, acks, dead letters, releases) and pops from
``prefetched``. The worker flushes ``ops`` in batches (one script call each), leases new work
into ``prefetched`` and sends the heartbeat. When Redis is away it keeps every op, stops
leasing, retries the same call (same call id, so nothing is applied twice) with backoff, and logs
the outage and the recovery once each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .config import ClusterConfig, redact_url
from .store import JobStore, Op, StateLost, StoreError, StoreUnavailable
from .store.job import new_call_id

logger = logging.getLogger(__name__)

FLUSH_LINGER_S = 0.05
MIN_SLEEP_S = 0.001
MAX_SLEEP_S = 0.5
EMPTY_QUEUE_BACKOFF_MAX_S = 1.0
OUTAGE_BACKOFF_MAX_S = 5.0
CLOSE_TIMEOUT_S = 15.0


class SyncWorker:
    def __init__(
        self,
        store: JobStore,
        config: ClusterConfig,
        epoch: str,
        node_info: Callable[[], dict[str, Any]],
        on_leased: Callable[[], None],
    ) -> None:
        self.store = store
        self.config = config
        self.epoch = epoch
        self._node_info = node_info
        self._on_leased = on_leased
        #: what Redis did with this node's writes; only the thread that flushes adds to it
        self.totals = {"pushed": 0, "filtered": 0, "released": 0}
        self.ops: deque[Op] = deque()
        self.prefetched: deque[tuple[str, bytes]] = deque()
        self.held: set[str] = set()  # lease ids of this node, owned by the worker thread
        self.node_idle = False  # set by the reactor thread
        self.finished = False
        self.state_lost: str | None = None
        self.away_since: float | None = None
        self._pending_flush: tuple[str, list[Op]] | None = None
        self._pending_lease: tuple[str, int] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._oldest_op_at: float | None = None
        self._next_heartbeat = 0.0
        self._next_lease = 0.0
        self._empty_backoff_s = 0.0
        self._outage_tries = 0
        self._thread = threading.Thread(target=self._run, name="clustersync-io", daemon=True)

    # ---- reactor-thread side -------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def add(self, op: Op) -> None:
        self.ops.append(op)
        if self._oldest_op_at is None:
            self._oldest_op_at = time.monotonic()
            self._wake.set()  # the worker sleeps until something is due; a batch's linger starts
        elif len(self.ops) >= self.config.batch_size:
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    @property
    def backlog(self) -> int:
        """Ops not yet in Redis, including a batch whose call is under way or being retried."""
        pending = self._pending_flush
        return len(self.ops) + (len(pending[1]) if pending else 0)

    @property
    def quiet(self) -> bool:
        """Nothing buffered, prefetched or held: the node owes Redis nothing."""
        return not (self.backlog or self.prefetched or self.held)

    def close(self, unacked: list[str]) -> list[Op]:
        """Release ``unacked`` leases, flush everything, leave the job; return undelivered ops."""
        self._stop.set()
        self._wake.set()
        # the thread first: a lease call under way would add to ``prefetched`` after a release
        self._thread.join(CLOSE_TIMEOUT_S)
        reachable = not (self._thread.is_alive() or self.state_lost or self.away_since)
        if reachable and self._pending_lease is not None:
            self._guard(self._lease)  # learn what a call whose answer was lost leased
        for entry_id, _ in list(self.prefetched):
            self.ops.append(("N", entry_id))
        self.prefetched.clear()
        for entry_id in unacked:
            self.ops.append(("N", entry_id))
        if not reachable:
            return self._undelivered()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while self.backlog and time.monotonic() < deadline and not self.state_lost:
            if not self._step_safely(closing=True):
                time.sleep(0.2)
        if not self.backlog and not self.state_lost:
            self._guard(lambda: self._send_heartbeat(leaving=True))
        return self._undelivered()

    def _undelivered(self) -> list[Op]:
        pending = self._pending_flush[1] if self._pending_flush else []
        return [*pending, *self.ops]

    # ---- worker thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the step, so a wake-up during it is not lost
            busy = self._step_safely(closing=False)
            if self.state_lost:
                return
            if self.away_since is not None:
                # backoff that new ops do not cut short
                self._stop.wait(min(OUTAGE_BACKOFF_MAX_S, 0.25 * 2 ** min(5, self._outage_tries)))
            elif not busy:
                self._wake.wait(self._sleep_s())

    def _sleep_s(self) -> float:
        """Until the next thing due: a heartbeat, a lingering batch, a lease retry."""
        now = time.monotonic()
        due = [self._next_heartbeat]
        if self.ops:
            due.append((self._oldest_op_at or now) + FLUSH_LINGER_S)
        if self._lease_wanted():
            due.append(self._next_lease)
        return min(MAX_SLEEP_S, max(MIN_SLEEP_S, min(due) - now))

    def _step_safely(self, closing: bool) -> bool:
        return bool(self._guard(lambda: self._step(closing)))

    def _guard(self, action: Callable[[], Any]) -> Any:
        try:
            result = action()
        except StoreUnavailable as exc:
            self._went_away(exc)
            return False
        except StateLost as exc:
            self._lost(exc)
            return False
        except StoreError as exc:
            logger.error("clustersync: Redis refused a call: %s; retrying", exc)
            time.sleep(1.0)
            return False
        self._came_back()
        return result

    def _step(self, closing: bool) -> bool:
        now = time.monotonic()
        busy = False
        if now >= self._next_heartbeat and not closing:
            self._next_heartbeat = now + self.config.heartbeat_interval_s
            self._send_heartbeat(leaving=False)
        if self._flush_due(now, closing):
            self._flush()
            busy = True
        if not closing and self._lease_due(now):
            busy = self._lease() or busy
        if not closing:  # bloom-prepare: next Bloom layer ahead of need, one chunk per step
            busy = self.store.prepare_bloom(self.epoch) or busy
        return busy

    def _flush_due(self, now: float, closing: bool) -> bool:
        if self._pending_flush is not None:
            return True
        if not self.ops:
            return False
        if closing or len(self.ops) >= self.config.batch_size or not self.prefetched:
            return True  # full batch, closing, or the node starves: its new work must go out now
        if self._oldest_op_at is None:
            self._oldest_op_at = now  # an op raced in while the last batch was being taken
        return now - self._oldest_op_at >= FLUSH_LINGER_S

    def _flush(self) -> None:
        if self._pending_flush is None:
            batch: list[Op] = []
            while self.ops and len(batch) < self.config.batch_size:
                batch.append(self.ops.popleft())
            self._oldest_op_at = time.monotonic() if self.ops else None
            self._pending_flush = (new_call_id(), batch)
        call_id, batch = self._pending_flush
        result = self.store.flush(self.epoch, batch, call_id)
        self._pending_flush = None
        for op in batch:
            if op[0] in ("A", "N", "D"):
                self.held.discard(op[1])
        if result.pushed:
            self._next_lease = 0.0
            self._empty_backoff_s = 0.0
        self.totals["pushed"] += result.pushed
        self.totals["filtered"] += result.filtered
        self.totals["released"] += result.released

    def _lease_due(self, now: float) -> bool:
        return now >= self._next_lease and self._lease_wanted()

    def _lease_wanted(self) -> bool:
        if self.state_lost or self.backlog > self.config.buffer_limit:
            return False  # back-pressure: stop taking work while writes pile up
        return len(self.prefetched) <= self.config.prefetch // 2

    def _lease(self) -> bool:
        if self._pending_lease is None:
            self._pending_lease = (new_call_id(), self.config.prefetch - len(self.prefetched))
        call_id, count = self._pending_lease
        lease_ms = int(self.config.lease_timeout_s * 1000)
        entries = self.store.lease(self.epoch, count, lease_ms, call_id)
        self._pending_lease = None
        if not entries:
            backoff_s = self._empty_backoff_s * 2 or 0.05
            self._empty_backoff_s = min(EMPTY_QUEUE_BACKOFF_MAX_S, backoff_s)
            self._next_lease = time.monotonic() + self._empty_backoff_s
            return False
        self._empty_backoff_s = 0.0
        was_empty = not self.prefetched
        self.held.update(entry_id for entry_id, _ in entries)
        self.prefetched.extend(entries)
        if was_empty:
            self._on_leased()
        return True

    def _send_heartbeat(self, leaving: bool) -> None:
        idle = self.node_idle and self.quiet
        beat = self.store.heartbeat(
            self.epoch,
            ttl_ms=0 if leaving else int(self.config.lease_timeout_s * 1000),
            lease_ms=int(self.config.lease_timeout_s * 1000),
            info=self._node_info() | {"state": "closed" if leaving else self._state(idle)},
            idle=idle,
            idle_after_ms=int(self.config.idle_close_after_s * 1000),
            lease_ids=sorted(self.held),
        )
        if beat.finished and not leaving:
            self.finished = True

    def _state(self, idle: bool) -> str:
        if self.away_since is not None:
            return "redis away"
        return "idle" if idle else "running"

    def _went_away(self, exc: Exception) -> None:
        self._outage_tries += 1
        if self.away_since is None:
            self.away_since = time.monotonic()
            logger.warning(
                "clustersync: Redis at %s is unreachable (%s). This node keeps running, leases "
                "no new work and buffers its writes until Redis is back.",
                redact_url(self.config.redis_url), exc,
            )

    def _came_back(self) -> None:
        if self.away_since is None:
            return
        logger.warning(
            "clustersync: Redis is reachable again after %.1fs; %d buffered writes are being sent.",
            time.monotonic() - self.away_since, self.backlog,
        )
        self.away_since = None
        self._outage_tries = 0
        self._next_heartbeat = 0.0

    def _lost(self, exc: Exception) -> None:
        if self.state_lost is None:
            self.state_lost = str(exc)
            logger.critical(
                "clustersync: job %r is gone from Redis at %s (%s). Redis restarted without "
                "persistence, or the job was purged. This node stops instead of re-crawling "
                "everything; enable Redis persistence (appendonly yes) and re-seed the job.",
                self.config.job, redact_url(self.config.redis_url), exc,
            )
