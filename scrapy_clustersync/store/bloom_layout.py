"""The layout of the job's scalable Bloom filter: how big each layer is and how it is cut.

A job's filter has one of two layouts, fixed by the dedup mode it stores (store/dedup.py):

- **blocked**, the layout of every job this version creates: layer 0 holds the planned
  capacity at half the configured error rate; layer ``i >= 1`` holds ``capacity *
  EXPANSION**(i-1)`` at ``error/2 * (1 - r) * r**(i-1)`` (r = ``TIGHTENING``). A fingerprint's
  bits lie in one ``BLOCK_BITS`` block of each layer, so a check reads one block per layer (one
  GETRANGE) and an add writes one (one SETRANGE). A block fills unevenly, so a blocked layer
  needs a few bits more than a classic one for the same rate (``blocked_false_positive_rate``
  is the model it is sized by).
- **classic**, the layout of the jobs made before: layer ``i`` holds ``capacity *
  CLASSIC_EXPANSION**i`` at ``error * (1 - r) * r**i`` (r = ``CLASSIC_TIGHTENING``), its bits
  spread over the whole layer by triple hashing (one GETBIT or SETBIT per bit). Kept exactly as
  it was: the nodes of earlier versions that run such a job compute its layers themselves.

Either way the error rates of the layers sum to at most the configured rate however far the
filter grows (the scheme of scalable Bloom filters), and every node derives the same layers
from the parameters stored with the job: the blocked sizing uses only IEEE arithmetic (no
``exp`` or ``log``, whose last digit may differ between platforms). Each layer is cut into about
``CHUNKS_PER_LAYER`` plain Redis strings of the job's hash tag, each sized to an allocator size
class so that Redis spends no memory on rounding, and none near the 512 MB string limit.

A layer is allocated before it is needed, one chunk per Redis call (store/bloom_prepare.py), from
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
from fractions import Fraction

#: blocked layout: each layer after the second holds this many times the one before (the
#: second holds the planned capacity again). Measured by bench/bloom.py against 2 (and a model
#: of 1.25 to 4): small steps leave less of the newest layer empty, at one more layer per check
EXPANSION = Fraction(3, 2)
#: blocked layout: the share of the configured error rate the first layer gets; the layers of
#: the growth share the rest, each ``TIGHTENING`` times the one before
FIRST_LAYER_ERROR_SHARE = 0.5
TIGHTENING = 0.8
#: a blocked layer's bits come in blocks of this size: a fingerprint's bits are all in one
BLOCK_BITS = 512
BLOCK_BYTES = BLOCK_BITS // 8
#: the bits a fingerprint sets in a block are distinct for up to 512 hash functions (bloom.lua)
MAX_BLOCK_HASHES = 64
#: classic layout (jobs made before the blocked one)
CLASSIC_TIGHTENING = 0.2
CLASSIC_EXPANSION = 2
#: classic layout: the flush script's triple hashing stays exact in doubles up to this many
MAX_HASHES = 90
CHUNKS_PER_LAYER = 32
MIN_CHUNK_BYTES = 64
#: room for Redis's string header inside an allocator size class
STRING_HEADER_BYTES = 16
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
    """What the job's filter is planned for: its first layer's capacity, the summed error, and
    its layout (blocked, or classic for a job made before)."""

    capacity: int
    error_rate: float
    blocked: bool = True

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"Bloom capacity must be at least 1, got {self.capacity}")
        if not 0 < self.error_rate < 1:
            raise ValueError(f"Bloom error rate must be between 0 and 1, got {self.error_rate}")


@dataclass(frozen=True)
class Layer:
    """The shape of one layer: its capacity, error rate, hash count, how it is cut, and whether
    its bits come in blocks."""

    index: int
    capacity: int
    error_rate: float
    hashes: int
    chunk_bytes: int
    chunks: int
    blocked: bool = False

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
        if self.blocked:
            return blocked_false_positive_rate(entries * BLOCK_BITS / self.bits, self.hashes)
        return (1 - math.exp(-self.hashes * entries / self.bits)) ** self.hashes


@functools.lru_cache(maxsize=256)
def layer(params: BloomParams, index: int) -> Layer:
    """Layer ``index`` of a filter with ``params``: the same on every node.

    Cached: every flush describes the filter's layers, and they never change.
    """
    if params.blocked:
        return _blocked_layer(params, index)
    return _classic_layer(params, index)


def _blocked_layer(params: BloomParams, index: int) -> Layer:
    capacity = params.capacity
    error = params.error_rate * FIRST_LAYER_ERROR_SHARE
    if index > 0:
        capacity = math.ceil(capacity * EXPANSION ** (index - 1))
        error *= 1 - TIGHTENING
        for _ in range(index - 1):
            error *= TIGHTENING
    hashes, per_block = block_fill(error)
    blocks = math.ceil(capacity / per_block)
    chunk_blocks = _chunk_bytes(blocks * BLOCK_BYTES) // BLOCK_BYTES
    chunks = math.ceil(blocks / chunk_blocks)
    return Layer(index, capacity, error, hashes, chunk_blocks * BLOCK_BYTES, chunks, True)


def _classic_layer(params: BloomParams, index: int) -> Layer:
    capacity = params.capacity * CLASSIC_EXPANSION**index
    error = params.error_rate * (1 - CLASSIC_TIGHTENING) * CLASSIC_TIGHTENING**index
    bits_needed = math.ceil(-capacity * math.log(error) / math.log(2) ** 2)
    hashes = min(MAX_HASHES, max(1, round(bits_needed / capacity * math.log(2))))
    while (1 - math.exp(-hashes * capacity / bits_needed)) ** hashes > error:
        bits_needed = math.ceil(bits_needed * 1.002) + 8
    chunk_bytes = _chunk_bytes(math.ceil(bits_needed / 8))
    chunks = math.ceil(bits_needed / 8 / chunk_bytes)
    return Layer(index, capacity, error, hashes, chunk_bytes, chunks)


@functools.lru_cache(maxsize=256)
def block_fill(error: float) -> tuple[int, float]:
    """The hash count and the most entries per block on average that keep a blocked layer's
    false-positive rate within ``error``: the hash count that allows the most."""
    best_hashes, best_fill = 1, 0.0
    for hashes in range(1, MAX_BLOCK_HASHES + 1):
        fill = _most_per_block(error, hashes)
        if fill > best_fill:
            best_hashes, best_fill = hashes, fill
        elif hashes > best_hashes + 2:  # the fill rises to one peak and falls after it
            break
    return best_hashes, best_fill


def _most_per_block(error: float, hashes: int) -> float:
    """The most entries per block on average at which ``hashes`` hash functions stay within
    ``error`` (bisection: the rate grows with the fill). No filter does with fewer than
    log2(1/error) bits per entry, which bounds the search."""
    looks_set: list[float] = []
    low, high = 0.0, BLOCK_BITS / max(1, _halvings(error))
    for _ in range(32):
        middle = (low + high) / 2
        if _blocked_rate(middle, hashes, looks_set) <= error:
            low = middle
        else:
            high = middle
    return low


def _halvings(error: float) -> int:
    """How many times 1 halves before it is below ``error``, less one: floor(log2(1/error))."""
    count, value = 0, 1.0
    while value / 2 >= error:
        value /= 2
        count += 1
    return count


def blocked_false_positive_rate(per_block: float, hashes: int) -> float:
    """Chance that a fresh fingerprint looks present in a blocked layer whose blocks hold
    ``per_block`` entries on average.

    The entries of one block follow a Poisson law; each sets ``hashes`` distinct bits of its
    block, so after ``j`` of them a bit is still 0 with chance ``(1 - hashes/BLOCK_BITS)**j``.
    Computed with IEEE arithmetic alone (the Poisson weights are normalised by their sum rather
    than by ``exp``), so every platform sizes the layers alike.
    """
    return _blocked_rate(per_block, hashes, [])


def _blocked_rate(per_block: float, hashes: int, looks_set: list[float]) -> float:
    """``blocked_false_positive_rate``; ``looks_set[j]``, the chance that a fresh fingerprint
    looks present in a block of ``j`` entries, is filled in as far as needed and kept by the
    caller for the next fill it tries with the same hash count."""
    if per_block <= 0:
        return 0.0
    top = int(per_block + 10 * math.sqrt(per_block) + 30)
    keep = 1 - hashes / BLOCK_BITS
    while len(looks_set) < top:
        looks_set.append(_power(1 - _power(keep, len(looks_set)), hashes))
    weight, weights, total = 1.0, 0.0, 0.0
    for entries in range(top):
        if entries:
            weight *= per_block / entries
        weights += weight
        total += weight * looks_set[entries]
    return total / weights


def _power(base: float, exponent: int) -> float:
    """``base ** exponent`` by squaring: the same sequence of IEEE products everywhere."""
    result = 1.0
    while exponent:
        if exponent & 1:
            result *= base
        base *= base
        exponent >>= 1
    return result


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
