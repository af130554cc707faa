"""The layout of the job's scalable Bloom filter: how big each layer is and how it is cut.

Layer ``i`` holds ``capacity * 2**i`` fingerprints at error rate ``error * (1 - r) * r**i``
(r = ``TIGHTENING``), so however many layers the filter grows, the summed error stays within the
configured rate (the scheme of RedisBloom's scalable filters). Each layer is cut into about
``CHUNKS_PER_LAYER`` plain Redis strings of the job's hash tag, each sized to an allocator size
class so that Redis spends no memory on rounding, and none near the 512 MB string limit.

Bit positions come from Scrapy's request fingerprint by triple hashing (h1 + i*h2 + i*i*h3,
computed in the Lua script); every node derives the same layout from the parameters stored with
the job.

A layer is allocated before it is needed, one chunk per Redis call (store/bloomprep.py), from
the moment the layer in use is ``PREPARE_AT_FILL`` full; the flush script never allocates one.

A small job needs no filter: a job starts with an exact set of fingerprints (about
``SET_BYTES_PER_FINGERPRINT`` each) and takes its filter's first layer into use only when the set
holds ``set_limit()`` fingerprints, about what that layer costs (never more than
``SET_LIMIT_MAX``). The set's fingerprints then move into the filter ``MIGRATE_BATCH`` per
Redis call (lua/dedup_migrate.lua), so a big job ends with the filter alone, as planned.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

TIGHTENING = 0.2
EXPANSION = 2
CHUNKS_PER_LAYER = 32
MIN_CHUNK_BYTES = 64
#: room for Redis's string header inside an allocator size class
STRING_HEADER_BYTES = 16
#: the flush script's triple hashing stays exact in doubles up to this many hash functions
MAX_HASHES = 90
MAX_CHUNK_BYTES = 256 * 2**20
#: the next layer is allocated (chunk by chunk, outside the flush) once the active layer holds
#: this share of its capacity: early enough that it is ready long before it is needed (it takes
#: one Redis call per chunk), late enough that little memory is held ahead of need
PREPARE_AT_FILL = 0.9
#: what one raw 20-byte fingerprint costs in a Redis set (measured by bench/bloom.py: 64.4)
SET_BYTES_PER_FINGERPRINT = 64
#: the exact set hands over to the filter at this many fingerprints at the most: the set and the
#: first layer both exist while the set's fingerprints move, so this bounds the overlap (6.4 MB)
#: and how long the move takes (SET_LIMIT_MAX / MIGRATE_BATCH calls)
SET_LIMIT_MAX = 100_000
#: fingerprints moved from the set into the filter per Redis call: the work of a flush of a
#: default batch (CLUSTERSYNC_BATCH_SIZE pushes), a few ms of Redis time
MIGRATE_BATCH = 200


@dataclass(frozen=True)
class BloomParams:
    """What the job's filter is planned for: its first layer's capacity and the summed error."""

    capacity: int
    error_rate: float

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"Bloom capacity must be at least 1, got {self.capacity}")
        if not 0 < self.error_rate < 1:
            raise ValueError(f"Bloom error rate must be between 0 and 1, got {self.error_rate}")


@dataclass(frozen=True)
class Layer:
    """The shape of one layer: its capacity, error rate, hash count and how it is cut."""

    index: int
    capacity: int
    error_rate: float
    hashes: int
    chunk_bytes: int
    chunks: int

    @property
    def chunk_bits(self) -> int:
        return self.chunk_bytes * 8

    @property
    def bits(self) -> int:
        return self.chunk_bits * self.chunks

    @property
    def bytes(self) -> int:
        return self.chunk_bytes * self.chunks

    def false_positive_rate(self, entries: int) -> float:
        """Chance that a fresh fingerprint looks present after ``entries`` inserts."""
        return (1 - math.exp(-self.hashes * entries / self.bits)) ** self.hashes


@functools.lru_cache(maxsize=256)
def layer(params: BloomParams, index: int) -> Layer:
    """Layer ``index`` of a filter with ``params``: the same on every node.

    Cached: every flush describes the filter's layers, and they never change.
    """
    capacity = params.capacity * EXPANSION**index
    error = params.error_rate * (1 - TIGHTENING) * TIGHTENING**index
    bits_needed = math.ceil(-capacity * math.log(error) / math.log(2) ** 2)
    hashes = min(MAX_HASHES, max(1, round(bits_needed / capacity * math.log(2))))
    while (1 - math.exp(-hashes * capacity / bits_needed)) ** hashes > error:
        bits_needed = math.ceil(bits_needed * 1.002) + 8
    chunk_bytes = _chunk_bytes(math.ceil(bits_needed / 8))
    chunks = math.ceil(bits_needed / 8 / chunk_bytes)
    return Layer(index, capacity, error, hashes, chunk_bytes, chunks)


def set_limit(params: BloomParams) -> int:
    """How many fingerprints the exact set of a new job holds before the filter takes over.

    About as many as cost the filter's first layer in a set (so a job never holds much more
    than its filter would), and at most ``SET_LIMIT_MAX``. 0: the filter from the first URL.
    """
    return min(SET_LIMIT_MAX, layer(params, 0).bytes // SET_BYTES_PER_FINGERPRINT)


def layer_to_prepare(
    params: BloomParams, active_layers: int, active_entries: int, set_entries: int
) -> int | None:
    """The layer to allocate ahead of need, or None if none is due yet.

    ``active_layers`` layers are in use and the last of them holds ``active_entries``. A job
    with no layer in use needs its first one once its exact set holds ``set_entries``, at least
    ``PREPARE_AT_FILL`` of ``set_limit()``.
    """
    if active_layers == 0:
        if set_entries >= PREPARE_AT_FILL * set_limit(params):
            return 0
        return None
    if active_entries >= PREPARE_AT_FILL * layer(params, active_layers - 1).capacity:
        return active_layers
    return None


def _chunk_bytes(layer_bytes: int) -> int:
    """The largest allocator-friendly string size that cuts the layer into enough chunks.

    Allocator size classes above 4 KiB come in four steps per doubling (1, 1.25, 1.5, 1.75
    times a power of two); a string that fills its class exactly wastes nothing.
    """
    target = max(MIN_CHUNK_BYTES, layer_bytes // CHUNKS_PER_LAYER)
    if target < 4096:
        return max(MIN_CHUNK_BYTES, (target // 64) * 64)
    power = 1 << (target.bit_length() - 1)  # the largest power of two <= target
    classes = [power * step // 4 for step in (4, 5, 6, 7)]
    size = max(c for c in classes if c <= target)
    return min(size, MAX_CHUNK_BYTES) - STRING_HEADER_BYTES


def expected_error(params: BloomParams, counts: list[int]) -> float:
    """The filter's false-positive rate now, given how many entries each layer holds."""
    miss = 1.0
    for index, entries in enumerate(counts):
        miss *= 1 - layer(params, index).false_positive_rate(entries)
    return 1 - miss
