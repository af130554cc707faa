"""``clustersync dead JOB --requeue``: dead letters back into the queue, each exactly once.

The dead list is read here (it is capped: flush_script.DEAD_LETTERS_KEPT), the letters to put
back are chosen, and ``lua/requeue.lua`` moves them in bounded batches: each letter leaves the
dead list and its request enters the queue in one atomic step, so a run repeated after a lost
reply, or two runs at once, requeue nothing twice. What cannot go back is counted, not moved: a
write Redis refused (it never was a request) and a letter whose request was already gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .consistency import queue_score_of
from .errors import StoreError, translate_errors
from .records import DeadLetter, FormatError, as_bytes
from .script_base import JobScript

if TYPE_CHECKING:
    from .job_store import JobStore

#: letters per script call: each call holds Redis for a fraction of a millisecond
REQUEUE_BATCH = 100
#: dead letters read per LRANGE
READ_BATCH = 1000


@dataclass
class RequeueResult:
    """What a requeue did: ``requeued`` letters put back; ``gone`` no longer in the dead list
    when the script looked (requeued before, by a run whose reply was lost, or trimmed);
    ``already_queued`` letters whose entry was held already (only the letter was removed);
    ``refused_writes`` and ``without_request`` left as they are (nothing to queue);
    ``not_found``: ids asked for that no dead letter has."""

    requeued: int = 0
    gone: int = 0
    already_queued: int = 0
    refused_writes: int = 0
    without_request: int = 0
    not_found: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"requeued": self.requeued, "gone": self.gone,
                "already_queued": self.already_queued, "refused_writes": self.refused_writes,
                "without_request": self.without_request, "not_found": self.not_found}


class RequeueScript(JobScript):
    """requeue.lua: ``run`` answers (requeued, gone, already queued) for a batch of letters;
    StoreError if the job does not exist."""

    FILE = "requeue"
    KEYS = ("meta", "dead", "entries", "queue", "stats")
    ARGV = ()
    ARGV_TAIL = "letter"

    def call(self, letters: Sequence[tuple[bytes, str, str]]) -> tuple[list[str], list[Any]]:
        k = self.keys
        args: list[Any] = []
        for letter in letters:
            args.extend(letter)
        return [k.meta, k.dead, k.entries, k.queue, k.stats], args

    def run(self, letters: Sequence[tuple[bytes, str, str]]) -> tuple[int, int, int]:
        requeued, gone, queued = (int(x) for x in self._call(*self.call(letters)))
        if requeued < 0:
            raise StoreError(f"job {self.keys.job!r} does not exist: nothing was requeued")
        return requeued, gone, queued


def requeue_dead_letters(store: JobStore, ids: Iterable[str] | None) -> RequeueResult:
    """Put back the dead letters of ``ids`` (every one when None), each once."""
    wanted = None if ids is None else set(ids)
    result = RequeueResult()
    chosen: list[tuple[bytes, str, str]] = []
    found: set[str] = set()
    for raw, letter in _dead_list(store):
        if wanted is not None and letter.entry_id not in wanted:
            continue
        found.add(letter.entry_id)
        if letter.refused_write:
            result.refused_writes += 1
        elif not letter.entry:
            result.without_request += 1
        else:
            chosen.append((raw, letter.entry_id, queue_score_of(letter.entry) or "0"))
    script = RequeueScript(store.client, store.keys)
    for start in range(0, len(chosen), REQUEUE_BATCH):
        requeued, gone, queued = script.run(chosen[start:start + REQUEUE_BATCH])
        result.requeued += requeued
        result.gone += gone
        result.already_queued += queued
    result.not_found = sorted((wanted or set()) - found)
    return result


def _dead_list(store: JobStore) -> list[tuple[bytes, DeadLetter]]:
    """Every item of the job's dead list, as stored and parsed, newest first."""
    items: list[tuple[bytes, DeadLetter]] = []
    with translate_errors(store.client):
        start = 0
        while True:
            raw = store.client.lrange(store.keys.dead, start, start + READ_BATCH - 1)
            for value in raw:
                try:
                    items.append((as_bytes(value), DeadLetter.parse(value)))
                except FormatError:
                    continue  # another program's item: never requeued
            if len(raw) < READ_BATCH:
                return items
            start += READ_BATCH
