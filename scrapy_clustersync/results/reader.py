"""Reading a job's results from Python: ``ResultReader`` (a consumer group: every result is
processed, a reader that dies before ``ack`` gets its results again) and ``export_batches``
(a cursor, no group: every result the stream holds, once, in order). docs/results-readers.md.

    reader = ResultReader("redis://10.0.0.5:6379/0", "shop", group="mine", consumer="host-1")
    for batch in reader.batches(count=500):
        save(batch)          # the user's own storage, committed
        reader.ack(batch)    # only then: acknowledged, and trimmed once every group has it

Redis access lives in store/ (results_store.py); this module decodes and decides when to stop.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING

from ..store import make_client
from ..store.keys import JobKeys
from ..store.results_store import Entry, ResultsStore, job_ended, read_job
from .record_format import KINDS, Result, decode_record

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

#: how long a result may stay pending with a consumer before another consumer takes it over
#: (XAUTOCLAIM): the consumer is taken for dead (killed, or hung past this)
DEFAULT_CLAIM_IDLE_S = 60.0
#: a blocking read waits at most this long (below the client's socket timeout)
MAX_BLOCK_MS = 5_000


class JobMissing(LookupError):
    """The job named does not exist on that Redis."""


class Batch(list[Result]):
    """Results read together, oldest first, and what acknowledges them: ``stream_ids`` holds
    every entry read (results of kinds not asked for and entries that cannot be decoded too,
    skipped and acknowledged with the batch); ``bad``: (stream id, why) of the latter."""

    def __init__(self, results: list[Result], stream_ids: list[str],
                 bad: list[tuple[str, str]] | None = None) -> None:
        super().__init__(results)
        self.stream_ids = stream_ids
        self.bad = bad or []


def decode_batch(entries: list[Entry], kinds: Collection[str]) -> Batch:
    """The Batch of raw stream entries: results of ``kinds`` decoded; an entry this version
    cannot read is logged once and set aside in ``bad`` (it never stops a reader)."""
    results, bad = [], []
    for sid, fields in entries:
        if fields is None:  # deleted while pending: nothing to read, only to acknowledge
            continue
        try:
            result = decode_record(sid, fields)
        except ValueError as exc:
            logger.warning("clustersync: skipped a result that cannot be read: %s", exc)
            bad.append((sid, str(exc)))
            continue
        if result.kind in kinds:
            results.append(result)
    return Batch(results, [sid for sid, _ in entries], bad)


def check_kinds(kinds: Collection[str] | None) -> tuple[str, ...]:
    """``kinds`` checked (None: every kind); ValueError naming an unknown one."""
    if kinds is None:
        return KINDS
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown result kind(s) {', '.join(unknown)}: "
                         f"the kinds are {', '.join(KINDS)}")
    return tuple(kinds)


def default_consumer() -> str:
    """``<host>-<pid>``: a consumer name of its own for each process."""
    return f"{socket.gethostname()}-{os.getpid()}"


class ResultReader:
    """One consumer of a reader group of a job's results (a Redis consumer group).

    The group is registered on first use, at the stream's start. Several readers of one group
    share the work; each group gets every result. A result is delivered again until it is
    acknowledged: to the same consumer name when it starts again, to another consumer of the
    group once it was pending ``claim_idle_s`` (its consumer died). An acknowledged result is
    never delivered to that group again, and it is trimmed from the stream once every group
    acknowledged it. Raises JobMissing for a job that does not exist, ValueError for bad
    arguments, and the store's errors (StoreError) when Redis fails.
    """

    def __init__(self, redis_url: str | None, job: str, group: str,
                 consumer: str | None = None, *, client: redis.Redis | None = None,
                 claim_idle_s: float = DEFAULT_CLAIM_IDLE_S,
                 kinds: Collection[str] | None = None) -> None:
        if client is None:
            if redis_url is None:
                raise ValueError("a Redis URL or a client is needed")
            client = make_client(redis_url)
        if not group:
            raise ValueError("a reader group needs a name")
        self.keys = JobKeys(job)
        self.store = ResultsStore(client, self.keys)
        self.group, self.consumer = group, consumer or default_consumer()
        self.claim_idle_ms = max(0, int(claim_idle_s * 1000))
        self.kinds = check_kinds(kinds)
        self._claim_cursor = "0-0"
        #: stream ids of the batches yielded and not acknowledged yet (a caller that reads
        #: ahead in a thread holds some while the reading goes on)
        self._held: set[str] = set()
        self._held_lock = threading.Lock()
        if not read_job(client, self.keys).exists:
            raise JobMissing(f"job {job!r} does not exist")
        self.store.register(group)

    def batches(self, count: int = 100, block_ms: int = 1000,
                follow: bool = False) -> Iterator[Batch]:
        """Batches of at most ``count`` results, until the job ended and the group has every
        result acknowledged (``follow``: on and on, waiting ``block_ms`` at a time). First
        what this consumer had pending (it started again), then what consumers that died left
        pending, then new results. A batch left unacknowledged comes again (see the class). The
        batches may be read ahead of their acknowledgement (in another thread): the end is
        reached once the group has nothing left to acknowledge but the batches this reader
        yielded."""
        block_ms = min(max(block_ms, 1), MAX_BLOCK_MS)
        yield from self._own_pending(count)
        # the end is known only after a read found nothing: read once more, then stop. A read
        # blocks only once the stream drained (a read came back short) and the job goes on:
        # a job that ended is not waited on
        ended = drained = False
        look = _EndLook(block_ms / 1000)
        while True:
            entries = self._claim(count) or self.store.read_group(
                self.group, self.consumer, count, block_ms if drained and not ended else None)
            if entries:
                batch = self._batch(entries)
                if batch is not None:
                    yield batch
            elif ended:
                if self.store.group(self.group).behind <= self._held_count():
                    return  # nothing is left but what this reader's caller holds
                ended = False  # other consumers still hold results: wait for them, blocking
                continue
            drained = len(entries) < count
            if drained and not (ended or follow) and look.due(found=bool(entries)):
                ended = job_ended(read_job(self.store.client, self.keys))

    def ack(self, batch: Batch) -> int:
        """Acknowledge every entry of ``batch`` (call it once the results are stored for
        good); answers how many were still pending. Trims what every group acknowledged."""
        if not batch.stream_ids:
            return 0
        acked = self.store.ack(self.group, batch.stream_ids)[0]
        with self._held_lock:
            self._held.difference_update(batch.stream_ids)
        return acked

    def _held_count(self) -> int:
        with self._held_lock:
            return len(self._held)

    def _hold(self, batch: Batch) -> Batch:
        with self._held_lock:
            self._held.update(batch.stream_ids)
        return batch

    def _own_pending(self, count: int) -> Iterator[Batch]:
        after = "0"
        while True:
            entries = self.store.read_group(self.group, self.consumer, count, None,
                                            pending_after=after)
            if not entries:
                return
            after = entries[-1][0]
            batch = self._batch(entries)
            if batch is not None:
                yield batch

    def _claim(self, count: int) -> list[Entry]:
        cursor, entries = self.store.claim_idle(self.group, self.consumer, self.claim_idle_ms,
                                                self._claim_cursor, count)
        self._claim_cursor = cursor
        return entries

    def _batch(self, entries: list[Entry]) -> Batch | None:
        """The batch of ``entries``; None for one of nothing but skipped entries, which is
        acknowledged here."""
        batch = decode_batch(entries, self.kinds)
        if batch:
            return self._hold(batch)
        self.ack(batch)
        return None


class _EndLook:
    """When a reader looks whether its job ended: after each read that found nothing, and
    after a short one (the stream drained) at most once per ``every_s`` (a reader that keeps
    up with a job going on would otherwise read the job's state with every batch)."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last_s = -math.inf

    def due(self, found: bool) -> bool:
        now = time.monotonic()
        if found and now - self.last_s < self.every_s:
            return False
        self.last_s = now
        return True


def export_batches(store: ResultsStore, since: str = "0", count: int = 1000,
                   follow: bool = False, block_ms: int = 1000,
                   kinds: Collection[str] | None = None,
                   ended: Callable[[], bool] | None = None) -> Iterator[Batch]:
    """Every result the stream holds after stream id ``since`` ("0": all), once, in stream
    order, a batch at a time; no group, nothing acknowledged or deleted. ``follow``: wait for
    more until ``ended()`` (default: the job ended) held before a read that found nothing."""
    wanted = check_kinds(kinds)
    job_over = ended or (lambda: job_ended(read_job(store.client, store.keys)))
    cursor, over = since or "0", False
    while True:
        entries = store.read_after(cursor, count)
        if not entries and follow and not over:
            entries = store.wait_after(cursor, count, min(max(block_ms, 1), MAX_BLOCK_MS))
        if entries:
            cursor = entries[-1][0]
            yield decode_batch(entries, wanted)
            continue
        if not follow or over:
            return
        over = job_over()  # then one more read: whatever came before the end is read
