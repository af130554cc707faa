"""``check.lua``: suspects of ``clustersync check`` confirmed (and, with repair, mended)
atomically, a bounded batch per call (consistency.py finds them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .records import as_text
from .script_base import JobScript

#: one suspect: its kind (consistency.KIND_TEXT), the entry id, and the queue score read from
#: its request ("" if not read)
Suspect = tuple[str, str, str]


class CheckScript(JobScript):
    """check.lua: ``run`` answers (kind, entry id, what was done) for each suspect that holds."""

    FILE = "check"
    KEYS = ("queue", "entries", "deadlines", "leased", "nodes", "node_leases", "reclaiming")
    ARGV = ("mode",)
    ARGV_TAIL = "suspect"

    def call(self, suspects: Sequence[Suspect], repair: bool) -> tuple[list[str], list[Any]]:
        k = self.keys
        args: list[Any] = ["repair" if repair else "check"]
        for suspect in suspects:
            args.extend(suspect)
        return ([k.queue, k.entries, k.deadlines, k.leased, k.nodes, k.node_leases,
                 k.reclaiming], args)

    def run(self, suspects: Sequence[Suspect], repair: bool) -> list[tuple[str, str, str]]:
        return list(_triples(self._call(*self.call(suspects, repair))))


def _triples(flat: Iterable[Any]) -> Iterator[tuple[str, str, str]]:
    items = [as_text(x) for x in flat]
    for i in range(0, len(items) - 2, 3):
        yield items[i], items[i + 1], items[i + 2]
