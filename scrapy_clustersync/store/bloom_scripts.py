"""The Bloom filter's upkeep scripts: ``bloom_prepare.lua`` allocates one chunk of a layer
ahead of need (bloom_prepare.py drives it), ``dedup_migrate.lua`` moves a bounded batch of a
Bloom job's exact set into its filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dedup import LayersDescribed
from .records import as_text
from .script_base import JobScript


class BloomPrepareScript(JobScript):
    """bloom_prepare.lua: ``run`` allocates chunk ``chunk`` of layer ``layer`` if it is the
    next one, and answers how many chunks of the layer exist now."""

    FILE = "bloom_prepare"
    KEYS = ("meta", "bloom", "chunk")
    ARGV = ("epoch", "layer", "chunk", "chunk_bytes", "chunks")

    def call(self, epoch: str, layer: int, chunk: int, chunk_bytes: int,
             chunks: int) -> tuple[list[str], list[Any]]:
        k = self.keys
        return [k.meta, k.bloom, k.bloom_chunk(layer, chunk)], [epoch, layer, chunk, chunk_bytes,
                                                                chunks]

    def run(self, epoch: str, layer: int, chunk: int, chunk_bytes: int, chunks: int) -> int:
        return int(self._call(*self.call(epoch, layer, chunk, chunk_bytes, chunks)))


@dataclass(frozen=True)
class Migrated:
    """What one dedup_migrate.lua call did: fingerprints moved, left in the exact set, and the
    filter's layers in use with the entries of the last of them."""

    moved: int
    left: int
    layers: int
    active_entries: int


class DedupMigrateScript(JobScript):
    """dedup_migrate.lua: ``run`` moves up to ``count`` fingerprints into the filter."""

    FILE = "dedup_migrate"
    HELPERS = ("bloom",)
    KEYS = ("meta", "seen", "bloom")
    KEYS_TAIL = "chunk"
    ARGV = ("epoch", "count", "dedup_mode", "described")
    ARGV_TAIL = "layout"

    def call(self, epoch: str, count: int, job_mode: str,
             layers: LayersDescribed) -> tuple[list[str], list[Any]]:
        k = self.keys
        return ([k.meta, k.seen, k.bloom, *layers.chunk_keys],
                [epoch, count, job_mode, layers.count, *layers.layouts])

    def run(self, epoch: str, count: int, job_mode: str, layers: LayersDescribed) -> Migrated:
        """Move up to ``count`` fingerprints of a job of stored mode ``job_mode``."""
        raw = self._call(*self.call(epoch, count, job_mode, layers))
        return Migrated(*(int(x) for x in as_text(raw).split()))
