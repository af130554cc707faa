"""Prefetch: the entries leased to a node ahead of need, held on the reactor until taken.

The Redis thread hands each lease's answer over whole (``add``), with ``covered``: how many of
the node's pushes Redis had applied when that lease call was made. The lease's order is right
against those pushes, not against later ones, so an entry that a later push of the node
outranks (a higher priority) is handed back, not handed out: prefetching never reorders
priorities against what a single Scrapy process would do (README, "Crawl order"). An entry
handed back is queued again and served before the lower ones: the lease's ``returned`` (how
many of the node's hand-backs Redis had applied) judges its entries against later hand-backs in
the same way. When the
engine takes an entry with nothing downloading (``exact``), a later push that the job's queue
serves first within the priority (LIFO, or another request before a start request) outranks it
too: the engine waits for a lease anyway then, so it gets Scrapy's exact order; while it
downloads, prefetching keeps the engine fed instead, but a start request still goes back when a
later push or hand-back of its priority is another request (Scrapy serves start requests last
whatever it downloads).

Everything here is the reactor's: the Redis thread never reads or writes it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ..store import Leased
from ..store.write_ops import PushFlags

#: entry ids start with their kind: "1" for a start request (flush.lua)
START_KIND = "1"
NO_FLAGS = PushFlags(0)


def served_before(priority: int, flags: int, entry: Leased) -> bool:
    """Whether the job's queue serves a push of ``priority`` and ``flags`` before ``entry``
    (the order of flush.lua's entry ids: priority, then other requests before start requests,
    then newest first in a LIFO queue)."""
    if priority != entry.priority:
        return priority > entry.priority
    push_is_start = bool(flags & PushFlags.START)
    entry_is_start = entry.entry_id.startswith(START_KIND)
    if push_is_start != entry_is_start:
        return entry_is_start
    return bool(flags & PushFlags.LIFO)


def _kind_flags(entry: Leased) -> PushFlags:
    """The flags of a push of ``entry`` again, as far as the order of kinds goes."""
    return PushFlags.START if entry.entry_id.startswith(START_KIND) else NO_FLAGS


class RecentPushes:
    """The priorities of a node's recent pushes, numbered in the order they were submitted.

    A lease call made when Redis had applied the node's first ``covered`` pushes hands out
    entries in the right order against those, not against later ones: ``highest_after(covered)``
    is the highest priority among the later pushes. Asked with a ``covered`` that never
    decreases (leases come in order), it keeps only the pushes that can still be the answer: a
    sliding-window maximum, one entry per run of priorities.
    """

    def __init__(self) -> None:
        self._window: deque[tuple[int, int]] = deque()  # (number, priority), priority falling
        #: every push above the last ``covered`` asked, for the exact order (``outranks``)
        self._pushes: deque[tuple[int, int, int]] = deque()

    def add(self, number: int, priority: int, flags: int = NO_FLAGS) -> None:
        window = self._window
        while window and window[-1][1] <= priority:
            window.pop()
        window.append((number, priority))
        self._pushes.append((number, priority, flags))

    def highest_after(self, covered: int) -> float:
        """The highest priority among pushes numbered above ``covered`` (-inf: none)."""
        window = self._window
        while window and window[0][0] <= covered:
            window.popleft()
        pushes = self._pushes
        while pushes and pushes[0][0] <= covered:
            pushes.popleft()
        return window[0][1] if window else float("-inf")

    def outranks(self, entry: Leased, covered: int, until: int | None) -> bool:
        """Whether a push numbered above ``covered`` (and up to ``until``, if given) is served
        before ``entry`` by the job's queue (``served_before``)."""
        self.highest_after(covered)  # forgets the pushes up to covered
        for number, priority, flags in self._pushes:
            if until is not None and number > until:
                return False
            if served_before(priority, flags, entry):
                return True
        return False

    def outranks_loosely(self, entry: Leased, covered: int) -> bool:
        """Whether a push numbered above ``covered`` has a higher priority than ``entry``, or,
        for a start request, is another request of its priority: the order a prefetch keeps
        while the engine downloads (the queue's order within a class may give way to keeping
        the engine fed; start requests last, a class of Scrapy's own, may not)."""
        if self.highest_after(covered) > entry.priority:
            return True
        if not entry.entry_id.startswith(START_KIND):
            return False
        return any(priority == entry.priority and not flags & PushFlags.START
                   for _, priority, flags in self._pushes)


class Prefetch:
    """Entries leased ahead, in lease order (how many: lease_sizing.py)."""

    def __init__(self) -> None:
        self._entries: deque[tuple[Leased, int, int]] = deque()  # entry, covered, returned
        self._covered = 0  # pushes Redis had applied when the last lease was made
        #: the entries handed back, numbered: queued again, they outrank lower ones leased
        #: before Redis had them (a hand-back is a push of the entry, for the order)
        self._returns = RecentPushes()
        self._handed_back = 0
        #: entries handed back untaken: a push of a higher priority came after them
        self.outranked = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def covered(self) -> int:
        """How many of the node's pushes Redis had applied when the last lease was made."""
        return self._covered

    def add(self, entries: Iterable[Leased], covered: int, returned: int = 0) -> None:
        """The answer of a lease call made when Redis had the node's first ``covered`` pushes
        and ``returned`` hand-backs (``take``)."""
        self._entries.extend((entry, covered, returned) for entry in entries)
        self._covered = max(self._covered, covered)

    def take(self, recent: RecentPushes, pushes_settled: int, handed_back: list[str],
             exact: bool = False, until: int | None = None) -> tuple[str, bytes] | None:
        """The next entry (id, encoded request), or None. An entry that ``recent`` pushes
        outrank is appended to ``handed_back`` instead (the Redis thread releases it, before
        it leases again). ``pushes_settled``: how many pushes Redis has applied (a later lease
        covers them: with nothing prefetched, ``recent`` forgets them). ``exact``: pushes of the
        same priority that the queue serves first outrank it too, and only the pushes up to
        ``until`` count (the engine asked when the node had made that many: later ones were
        not there yet for Scrapy's scheduler)."""
        if not self._entries:
            recent.highest_after(pushes_settled)
        while self._entries:
            entry, covered, returned = self._entries.popleft()
            if (self._returns.outranks_loosely(entry, returned)
                    or (recent.outranks(entry, covered, until) if exact
                        else recent.outranks_loosely(entry, covered))):
                self.outranked += 1
                handed_back.append(entry.entry_id)
                self._handed_back += 1
                self._returns.add(self._handed_back, int(entry.priority), _kind_flags(entry))
                continue
            return entry.entry_id, entry.blob
        return None

    def entry_ids(self) -> list[str]:
        """The ids of the entries waiting, in order."""
        return [entry.entry_id for entry, _, _ in self._entries]

    def drop_all(self) -> list[str]:
        """Remove every waiting entry; returns their ids (to release)."""
        ids = [entry.entry_id for entry, _, _ in self._entries]
        self._entries.clear()
        return ids
