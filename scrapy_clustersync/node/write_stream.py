"""WriteStream: a node's writes to Redis, in the order they were made, sent batch by batch.

The Redis thread owns it whole: it adds the ops the reactor queued for it (``add``) and takes
them in batches, one script call each,
and never takes the next batch before Redis confirmed the last one (a call that failed is sent
again as it was, under the same call id, so Redis applies it once). So Redis holds a prefix of
the node's writes at all times: never an ack without the pushes made before it.

Two things change a batch on its way:
- a batch Redis refused for what it holds (a malformed op) is halved until the op is found;
  that op's dead letter takes its place (``refused``);
- once Redis came back older than the node saw it, the acks of the requests the node had
  under way become releases (``void``): their children may be among the lost writes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable

from ..store import Op
from ..store.job_store import new_call_id
from ..store.write_ops import Ack, Push, PushFlags, Release, StatsCounts, dead_letter_for
from .thread_api import Undelivered

#: how long a batch that is not full waits for more ops, unless the node starves
FLUSH_LINGER_S = 0.05
#: a batch ends once its ops carry this many bytes of results (one XADD each inside the
#: script): a node back from an outage does not hold Redis for tens of thousands of them
RESULT_BYTES_PER_CALL = 1 << 20


class WriteStream:
    """The node's ordered write buffer, on the Redis thread (see the module doc)."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self._ops: deque[Op] = deque()
        #: the batch whose call is under way or failed, with its call id, until Redis confirms
        self._pending: tuple[str, list[Op]] | None = None
        self._batch_limit = batch_size  # smaller while a refused op is looked for
        self._oldest_at: float | None = None
        self._void: set[str] = set()  # leases whose acks must become releases
        self._pushes_added = 0
        self._pushes_settled = 0
        self._returning: set[str] = set()  # the entries handed back, released not yet applied
        self._returns_settled = 0

    def add(self, op: Op, now: float) -> None:
        """Buffer ``op`` (taken from the reactor's queue at ``now``) behind every op before it."""
        if isinstance(op, Push):
            self._pushes_added += 1
        self._ops.append(op)
        if self._oldest_at is None:
            self._oldest_at = now

    @property
    def pushes_added(self) -> int:
        """How many pushes were added: the reactor numbers its pushes the same way."""
        return self._pushes_added

    @property
    def pushes_settled(self) -> int:
        """How many of the first pushes Redis applied (or set aside): always a prefix."""
        return self._pushes_settled

    @property
    def returns_settled(self) -> int:
        """How many of the entries the reactor handed back (``hand_back``) Redis released, or
        set aside: always the first ones (releases keep their order among themselves)."""
        return self._returns_settled

    def returns_in(self, batch: list[Op]) -> int:
        """How many of the hand-backs ``returns_settled`` counts are in ``batch``."""
        returning = self._returning
        return sum(type(op) is Release and op.entry_id in returning for op in batch)

    def __len__(self) -> int:
        """Ops not yet in Redis, including a batch whose call is under way or being retried."""
        pending = self._pending
        return len(self._ops) + (len(pending[1]) if pending else 0)

    def due(self, now: float, urgent: bool) -> bool:
        """A batch should go out now: one in doubt, a full one, a lingering one, or any when
        ``urgent`` (the node closes, or starves: its new work must reach Redis)."""
        if self._pending is not None:
            return True
        if not self._ops:
            return False
        if urgent or len(self._ops) >= self.batch_size:
            return True
        if self._oldest_at is None:
            self._oldest_at = now
        return now - self._oldest_at >= FLUSH_LINGER_S

    def linger_until(self, now: float) -> float | None:
        """When the waiting ops are due at the latest (None: nothing waits)."""
        return (self._oldest_at or now) + FLUSH_LINGER_S if self._ops else None

    def batch(self, pushes_until: int | None = None) -> tuple[str, list[Op]]:
        """The batch to send and its call id: the one in doubt, else the next ops in order.

        ``pushes_until``: the batch ends before the push that follows the first
        ``pushes_until`` pushes (a lease goes between: the engine starved for those), and
        takes every release still buffered along ahead of the later writes, so that the lease
        finds them queued again. A release may overtake anything: it has no children to wait
        for, and one that reaches Redis early only returns its request to the queue early.
        Nothing to send before that lease: an empty batch, not sent (``""`` for its call id).
        """
        if self._pending is None:
            batch: list[Op] = []
            pushes = self._pushes_settled
            results = 0  # bytes of results in the batch
            while self._ops and (len(batch) < self._batch_limit
                                 and results < RESULT_BYTES_PER_CALL
                                 or self._replacement_last(batch)):
                if (pushes_until is not None and pushes >= pushes_until
                        and isinstance(self._ops[0], Push)):
                    self._releases_ahead(batch)
                    break
                op = self._ops.popleft()
                pushes += isinstance(op, Push)
                results += len(getattr(op, "results", b""))
                batch.append(self._voided(op))
            if not batch:
                return "", batch
            self._oldest_at = time.monotonic() if self._ops else None
            self._pending = (new_call_id(), batch)
        return self._pending

    def _replacement_last(self, batch: list[Op]) -> bool:
        """``batch`` ends with a redirect's or retry's push, which Redis queues only if the
        ack after it (of the lease it replaces) takes effect: that ack goes in the same batch,
        unless a refused op is being looked for (then the push goes alone, queued as any)."""
        last = batch[-1] if batch else None
        return (isinstance(last, Push) and bool(last.flags & PushFlags.REPLACES)
                and self._batch_limit == self.batch_size)

    def _releases_ahead(self, batch: list[Op]) -> None:
        """Move the buffered releases into ``batch`` (as room allows), keeping their order."""
        kept: deque[Op] = deque()
        for op in self._ops:
            if isinstance(op, Release) and len(batch) < self._batch_limit:
                batch.append(op)
            else:
                kept.append(op)
        self._ops = kept

    def confirmed(self) -> list[str]:
        """Redis applied the batch; returns the lease ids it settled (acked, released, dead)."""
        assert self._pending is not None
        _, batch = self._pending
        self._pending = None
        # past the refused op (if any): back to full batches, doubling
        self._batch_limit = min(self.batch_size, self._batch_limit * 2)
        self._pushes_settled += sum(isinstance(op, Push) for op in batch)
        self._settle_returns(batch)
        settled = [op.settles for op in batch if op.settles is not None]
        self._void.difference_update(settled)
        return settled

    def refused(self) -> Op | None:
        """Redis refused the batch, before any change. Returns its op if it was the only one
        (that op's dead letter goes first in its place); else the batch is halved and sent on."""
        assert self._pending is not None
        _, batch = self._pending
        self._pending = None
        if len(batch) > 1:
            self._ops.extendleft(reversed(batch))  # back in front, in order
            self._batch_limit = max(1, len(batch) // 2)
            return None
        [op] = batch
        if isinstance(op, Push):  # its dead letter takes its place: it is settled
            self._pushes_settled += 1
        self._settle_returns(batch)
        return op

    def _settle_returns(self, batch: list[Op]) -> None:
        returns = self.returns_in(batch)
        if returns:
            self._returns_settled += returns
            self._returning.difference_update(
                op.entry_id for op in batch if type(op) is Release)

    def set_aside(self, op: Op, reason: str) -> None:
        """Send the dead letter of ``op``, which Redis refused for ``reason``, in its place."""
        letter = dead_letter_for(op, reason)
        if letter is not None:
            self._ops.appendleft(letter)

    def void(self, entry_ids: Iterable[str]) -> int:
        """Acks of ``entry_ids`` become releases; a batch in doubt goes back to be rebuilt (it
        was refused before any change). Returns how many leases are voided."""
        self._void.update(entry_ids)
        if self._pending is not None:
            self._ops.extendleft(reversed(self._pending[1]))
            self._pending = None
        return len(self._void)

    def release(self, entry_ids: Iterable[str]) -> None:
        """Hand ``entry_ids`` back to the queue, after every op added so far."""
        self._ops.extend(Release(entry_id) for entry_id in entry_ids)

    def hand_back(self, entry_id: str) -> None:
        """Release ``entry_id``, which the reactor handed back untaken (counted as settled by
        ``returns_settled`` once Redis applied it)."""
        self._returning.add(entry_id)
        self.release([entry_id])

    def undelivered(self, writes_seen: int) -> Undelivered:
        """What is not in Redis yet, for the spool. Stats counts are left out: they are best
        effort, and a spool file without them is read by the previous version too (a batch in
        doubt keeps its call id, so Redis still applies it once)."""
        pending = None
        if self._pending is not None:
            call_id, batch = self._pending
            kept = [op for op in batch if not isinstance(op, StatsCounts)]
            pending = (call_id, tuple(kept)) if kept else None
        ops = tuple(self._voided(op) for op in self._ops if not isinstance(op, StatsCounts))
        return Undelivered(pending, ops, writes_seen)

    def _voided(self, op: Op) -> Op:
        if isinstance(op, Ack) and op.entry_id in self._void:
            return op.as_release()
        return op
