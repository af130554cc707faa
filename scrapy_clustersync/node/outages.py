"""How the node's Redis thread meets a failure: Redis away, the job gone, Redis older than it was.

Part of ``redis_thread.SyncWorker`` (a mixin over its state, on the Redis thread only):

- Redis away (``StoreUnavailable``): the node keeps every op, leases nothing, retries the same
  call (same call id, so nothing is applied twice), at once and then with backoff, each try
  beginning with the heartbeat, and logs the outage and the recovery once each.
- The job gone from Redis (``StateLost``): the node stops (``clustersync_state_lost``).
- Redis came back older than the node saw it (``RolledBack``): acks of requests whose children
  may be among the lost writes become releases (the requests are crawled again), and the
  scheduler forgets which fingerprints it sent (``rollbacks`` changes).
- The job's results stream full (``ResultsFull``, a batch carrying results refused whole):
  back-pressure; the node keeps the batch, leases no new work, tries it again with backoff, and
  says so once in the log and in its record, until readers trim the stream.
- Any other error is logged once and retried after ``ERROR_BACKOFF_S``: a bug must not end the
  thread, or the node would hang.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import ClusterConfig, redact_url
from ..store import StateLost, StoreError, StoreUnavailable
from ..store.errors import ResultsFull, RolledBack

if TYPE_CHECKING:
    from .write_stream import WriteStream

logger = logging.getLogger(__name__)

OUTAGE_BACKOFF_MAX_S = 5.0
ERROR_BACKOFF_S = 1.0


class OutagePart:
    """The failure handling of ``SyncWorker`` (see the module doc)."""

    config: ClusterConfig
    _writes: WriteStream
    _held: set[str]
    _unstarted: dict[str, int]
    _next_heartbeat: float
    _settings_due: bool

    def _init_outages(self) -> None:
        self._away_since: float | None = None
        self._outage_tries = 0
        self._errors_logged: set[str] = set()
        self._rollbacks = 0
        self._state_lost: str | None = None
        #: since when (Unix seconds) the job's results stream refuses this node's writes, or None
        self._results_full_since: float | None = None
        self._results_tries = 0
        self._results_retry_at = 0.0  # (monotonic) when the refused batch goes again

    def _results_refused(self, exc: ResultsFull) -> None:
        """The results stream is full: the batch waits (``_results_waiting``), no lease goes."""
        self._results_tries += 1
        self._results_retry_at = time.monotonic() + min(
            OUTAGE_BACKOFF_MAX_S, 0.25 * 2.0 ** min(5, self._results_tries - 1))
        if self._results_full_since is None:
            self._results_full_since = time.time()
            length, cap, _ = (str(exc).split() + ["?", "?", "?"])[1:4]
            logger.warning(
                "clustersync: the results stream of job %r is full (%s entries, "
                "CLUSTERSYNC_RESULTS_MAX %s); node %s leases no new work and keeps its results "
                "until readers trim the stream (nothing is dropped)",
                self.config.job, length, cap, self.config.node_id,
            )

    def _results_waiting(self, now: float) -> bool:
        """A batch the full results stream refused waits for its next try."""
        return self._results_full_since is not None and now < self._results_retry_at

    def _results_room(self) -> None:
        """A batch went through: the results stream has room (again)."""
        if self._results_full_since is None:
            return
        logger.warning("clustersync: the results stream of job %r has room again after %.1fs; "
                       "node %s leases again", self.config.job,
                       time.time() - self._results_full_since, self.config.node_id)
        self._results_full_since = None
        self._results_tries = 0

    def _outage_backoff_s(self) -> float:
        """The wait before the next try: none after the first failure (a dropped connection
        may find Redis back at once, and the heartbeat must not come later than the other
        nodes' for a backoff), then 0.5 s, doubling up to OUTAGE_BACKOFF_MAX_S."""
        if self._outage_tries <= 1:
            return 0.0
        return min(OUTAGE_BACKOFF_MAX_S, 0.25 * 2.0 ** min(5, self._outage_tries - 1))

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
            time.sleep(ERROR_BACKOFF_S)
            return False
        except Exception as exc:  # a bug must not end the thread: the node would hang
            self._log_once(logging.ERROR, f"clustersync: unexpected error in the Redis thread: "
                           f"{exc!r}; retrying", exc_info=True)
            time.sleep(ERROR_BACKOFF_S)
            return False
        self._came_back()
        return result

    def _survive(self, action: Callable[[], object]) -> None:
        """Run ``action`` (its Redis calls are ``_guard``ed); a bug in it is logged once and
        the loop goes on: a dead thread would never answer the node's close, which would hang."""
        try:
            action()
        except Exception as exc:
            self._report_bug(exc)

    def _report_bug(self, exc: Exception) -> None:
        """Log a bug once (the loop goes on after a short pause)."""
        self._log_once(logging.ERROR, f"clustersync: unexpected error in the Redis thread: "
                       f"{exc!r}; going on", exc_info=True)
        time.sleep(ERROR_BACKOFF_S)

    def _log_once(self, level: int, message: str, exc_info: bool = False) -> None:
        if message not in self._errors_logged:
            self._errors_logged.add(message)
            logger.log(level, message, exc_info=exc_info)

    def _went_away(self, exc: Exception) -> None:
        self._outage_tries += 1
        self._next_heartbeat = 0.0  # each try starts with the heartbeat, not a retried write
        if self._away_since is None:
            self._away_since = time.monotonic()
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
            time.monotonic() - self._away_since, len(self._writes),
        )
        self._away_since = None
        self._settings_due = True  # the shared settings may have changed meanwhile
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
        voided = self._writes.void(self._held.difference(self._unstarted))
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
            logger.critical(
                "clustersync: job %r is gone from Redis at %s (%s). Redis restarted without "
                "persistence, or the job was purged. This node stops instead of re-crawling "
                "everything; enable Redis persistence (appendonly yes) and re-seed the job.",
                self.config.job, redact_url(self.config.redis_url), exc,
            )
