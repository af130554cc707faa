"""Allocating the Bloom filter's layers ahead of need, one chunk per Redis call.

A layer can be hundreds of MB. Allocated inside the flush script, it would block Redis for the
whole layer (about 300 ms for the default settings' fifth layer, 544 MiB) and could go past
``maxmemory``, which Redis checks for a script only before the script's first write. So the
flush script never allocates: it refuses a batch that may need a layer whose chunks do not all
exist yet (CLUSTERSYNC_BLOOM_NOT_READY, before any change), and bloom_prepare.lua allocates a
layer one chunk (about 1/32 of it) per call, each call checked against ``maxmemory`` on its own.
"""

from __future__ import annotations

import logging
import time

from .bloom_layout import BloomParams, layer, layer_to_prepare
from .bloom_scripts import BloomPrepareScript
from .errors import StateLost, StoreError, StoreUnavailable

logger = logging.getLogger(__name__)

#: after Redis refused a chunk (out of memory, say), wait this long before trying ahead again;
#: a flush that needs the layer tries at once, and says why it cannot go on
PREPARE_RETRY_S = 10.0


class BloomPreparer:
    """One node's side of allocating the job's next Bloom layer; several nodes may race."""

    def __init__(self, step_script: BloomPrepareScript) -> None:
        self._step_script = step_script
        self._ready = 0  # layers [0, _ready) are known to be fully allocated
        self._due: int | None = None  # the layer to allocate ahead of need (observe() says)
        self._next_chunk = 0  # how many chunks of the due layer exist, as far as this node knows
        self._retry_at = 0.0

    def observe(self, params: BloomParams, active_layers: int, active_entries: int,
                set_entries: int) -> None:
        """Learn the filter's state from a flush: is a layer due to be allocated ahead of need?

        ``set_entries``: the fingerprints in the job's exact set (see
        bloom_layout.layer_to_prepare).
        """
        self._ready = max(self._ready, active_layers)
        if self._due is not None and self._due < self._ready:
            self._due = None
        wanted = layer_to_prepare(params, active_layers, active_entries, set_entries)
        if self._due is None and wanted is not None and wanted >= self._ready:
            self._due, self._next_chunk = wanted, 0

    def step(self, epoch: str, params: BloomParams) -> bool:
        """Allocate at most one chunk of the due layer; True if that layer needs more calls.

        Without a due layer this makes no Redis call. A refusal from Redis (out of memory) is
        logged and tried again after ``PREPARE_RETRY_S``: preparing ahead is never urgent, and
        the flush that needs the layer reports the error itself.
        """
        if self._due is None or time.monotonic() < self._retry_at:
            return False
        index = self._due
        try:
            self._next_chunk = self._allocate_chunk(epoch, params, index, self._next_chunk)
        except (StoreUnavailable, StateLost):
            raise
        except StoreError as exc:
            self._retry_at = time.monotonic() + PREPARE_RETRY_S
            logger.warning("clustersync: allocating Bloom layer %d ahead of need failed, "
                           "retrying in %.0fs: %s", index, PREPARE_RETRY_S, exc)
            return False
        if self._next_chunk < layer(params, index).chunks:
            return True
        self._layer_ready(index)
        return False

    def prepare(self, epoch: str, params: BloomParams, index: int) -> None:
        """Allocate every chunk of layer ``index`` now, one call per chunk (a flush needs it).

        Every call either allocates the next chunk or learns that another node did, so this
        ends within ``2 * chunks + 1`` calls.
        """
        chunks = layer(params, index).chunks
        done = self._next_chunk if index == self._due else 0
        for _ in range(2 * chunks + 1):
            if done >= chunks:
                self._layer_ready(index)
                return
            done = self._allocate_chunk(epoch, params, index, done)
        raise StoreError(f"Bloom layer {index} still not allocated after {2 * chunks + 1} calls")

    def _allocate_chunk(self, epoch: str, params: BloomParams, index: int, chunk: int) -> int:
        """One bloom_prepare.lua call; returns how many chunks of layer ``index`` exist now."""
        shape = layer(params, index)
        try:
            return self._step_script.run(epoch, index, chunk, shape.chunk_bytes, shape.chunks)
        except StateLost:
            raise
        except StoreError as exc:  # an outage (out of memory, say) stays an outage
            raise type(exc)(
                f"Redis refused chunk {chunk + 1}/{shape.chunks} ({shape.chunk_bytes:,} bytes) of "
                f"Bloom layer {index} ({shape.bytes:,} bytes): {exc}"
            ) from exc

    def _layer_ready(self, index: int) -> None:
        self._ready = max(self._ready, index + 1)
        if self._due is not None and self._due < self._ready:
            self._due = None
