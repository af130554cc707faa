"""The sites of a job pinned to regions (``clustersync regions``; regions.py has what a region
means to a node): read here, changed by ``lua/regions.lua``, which moves the requests a site
has queued into the queue classes of its new region in the same step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import StoreError, translate_errors
from .records import as_text
from .script_base import JobScript

if TYPE_CHECKING:
    from .job_store import JobStore

#: sites per script call: each call holds Redis for a few commands per site and queue class
PINS_PER_CALL = 200
#: pins read per HSCAN step
READ_BATCH = 1000


class RegionsScript(JobScript):
    """regions.lua: ``run`` pins each site to its region ("" unpins it) and answers how many
    sites changed and how many queued requests moved; StoreError if the job does not exist."""

    FILE = "regions"
    HELPERS = ("frontier",)
    KEYS = ("meta", "frontier")
    ARGV = ()
    ARGV_TAIL = "pins"

    def call(self, pins: Mapping[str, str]) -> tuple[list[str], list[Any]]:
        args: list[Any] = []
        for site, region in pins.items():
            args.extend((site, region))
        return [self.keys.meta, self.keys.frontier], args

    def run(self, pins: Mapping[str, str]) -> tuple[int, int]:
        changed, moved = (int(x) for x in self._call(*self.call(pins)))
        if changed < 0:
            raise StoreError(f"job {self.keys.job!r} does not exist: no site was pinned")
        return changed, moved


def pin_sites(store: JobStore, pins: Mapping[str, str]) -> tuple[int, int]:
    """Pin each site of ``pins`` to its region ("": to none); (sites changed, queued requests
    moved)."""
    script = RegionsScript(store.client, store.keys)
    items = list(pins.items())
    changed = moved = 0
    for start in range(0, len(items), PINS_PER_CALL):
        step = script.run(dict(items[start:start + PINS_PER_CALL]))
        changed, moved = changed + step[0], moved + step[1]
    return changed, moved


def read_pins(store: JobStore) -> dict[str, str]:
    """Every site of the job pinned to a region, and its region."""
    with translate_errors(store.client):
        return {as_text(site): as_text(region) for site, region in
                store.client.hscan_iter(store.keys.frontier_regions, count=READ_BATCH)}
