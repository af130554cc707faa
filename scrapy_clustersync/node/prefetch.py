"""Prefetch: the entries leased to a node ahead of need, from the Redis thread to the reactor.

Each entry comes with ``covered``: how many of the node's pushes Redis had applied when the
lease call that brought it was made. The lease's order is right against those pushes, not
against later ones, so an entry that a later push of the node outranks (a higher priority) is
handed back, not handed out: prefetching never reorders priorities against what a single
Scrapy process would do (README, "Crawl order").
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from ..store import Leased
from .write_stream import RecentPushes


class Prefetch:
    """Entries leased ahead: the Redis thread adds them (``add``), the reactor takes them.

    ``low_water``: below this many, ``wake`` asks the Redis thread to lease more.
    """

    def __init__(self, low_water: int, wake: Callable[[], None]) -> None:
        self.low_water = low_water
        self._wake = wake
        self._entries: deque[tuple[Leased, int]] = deque()  # append and popleft are atomic
        self._lease_made = threading.Condition()
        self._covered = 0  # pushes Redis had applied when the last lease was made
        #: the reactor waits (``wait``) for a lease made after its first n pushes
        self._wanted_after = 0
        #: entries handed back untaken: a push of a higher priority came after them
        self.outranked = 0
        self._returned: deque[str] = deque()  # their ids, until the Redis thread releases them
        #: a wait ran out and no lease came back since (Redis stopped answering, or errs): the
        #: reactor does not wait again, so a partition does not stall it a second per request
        self._wait_ran_out = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def covered(self) -> int:
        """How many of the node's pushes Redis had applied when the last lease was made."""
        return self._covered

    # ---- reactor thread ------------------------------------------------------------------
    def take(self, recent: RecentPushes, pushes_settled: int) -> tuple[str, bytes] | None:
        """The next entry (id, encoded request), or None. An entry that ``recent`` pushes
        outrank is handed back instead (``returned``): the Redis thread releases it, behind
        those pushes, before it leases again. ``pushes_settled``: how many pushes Redis has
        applied (a later lease covers them: with nothing prefetched, ``recent`` forgets them)."""
        if not self._entries:
            recent.highest_after(pushes_settled)
        while self._entries:
            entry, covered = self._entries.popleft()
            if len(self._entries) == self.low_water:
                self._wake()  # lease more before the buffer runs dry
            if recent.highest_after(covered) > entry.priority:
                self.outranked += 1
                self._returned.append(entry.entry_id)
                self._wake()
                continue
            return entry.entry_id, entry.blob
        return None

    def wait(self, pushes: int, timeout_s: float, give_up: Callable[[], bool]) -> None:
        """Block until an entry waits or a lease made after the first ``pushes`` pushes came
        back, ``give_up()`` holds (checked when a lease comes back or ``wake_waiters`` is
        called), or ``timeout_s``."""
        if self._wait_ran_out:
            return
        self._wanted_after = pushes
        self._wake()
        with self._lease_made:
            came = self._lease_made.wait_for(
                lambda: bool(self._entries) or self._covered >= pushes or give_up(), timeout_s)
            self._wait_ran_out = not came

    # ---- Redis thread --------------------------------------------------------------------
    def awaited(self, pushes_settled: int) -> bool:
        """The reactor waits for a lease, and every push it waits for is in Redis now."""
        return self._covered < self._wanted_after <= pushes_settled

    def add(self, entries: list[Leased], covered: int) -> None:
        """The answer of a lease call made when Redis had the node's first ``covered`` pushes."""
        self._entries.extend((entry, covered) for entry in entries)
        with self._lease_made:
            self._covered = covered
            self._wait_ran_out = False
            self._lease_made.notify_all()

    def returned(self) -> list[str]:
        """The ids of the entries the reactor handed back since the last call (to release)."""
        ids = []
        while self._returned:
            ids.append(self._returned.popleft())
        return ids

    def wake_waiters(self) -> None:
        """Something a waiting reactor gives up on happened (Redis away, the job lost)."""
        with self._lease_made:
            self._lease_made.notify_all()

    def entry_ids(self) -> list[str]:
        """The ids of the entries waiting (one atomic copy: the reactor may pop meanwhile)."""
        return [entry.entry_id for entry, _ in list(self._entries)]

    def drop_all(self) -> list[str]:
        """Remove every waiting entry, one atomic pop at a time, so that each one either went
        to the reactor before or is returned here, never both (a node declared dead drops
        them while its reactor may be taking one); returns their ids and those handed back."""
        ids = self.returned()
        while True:
            try:
                entry, _ = self._entries.popleft()
            except IndexError:
                return ids
            ids.append(entry.entry_id)

    def drain(self) -> list[str]:
        """Remove every waiting entry; returns their ids (the node closes: to release)."""
        ids = self.entry_ids()
        self._entries.clear()
        return ids
