"""One node's view of the job's dedup record: what its flush calls describe, and the Bloom
filter's upkeep (layers allocated ahead of need, the exact set moved into the filter).

The view is learnt from the scripts' answers (``observe``), never read on its own: a flush
answers the layers in use and the entries of the set and of the last layer.
"""

from __future__ import annotations

import redis

from ..config import DedupSettings
from .bloom_layout import MIGRATE_BATCH, BloomParams, set_limit
from .bloom_prepare import BloomPreparer
from .bloom_scripts import BloomPrepareScript, DedupMigrateScript
from .dedup import bloom_params, bloom_refusal, describe_layers, job_mode_for
from .errors import StoreError
from .flush_script import FlushDedup
from .keys import JobKeys


class DedupUpkeep:
    """The dedup settings a node uses for its job, and the state of the job's record as the
    node last saw it."""

    def __init__(self, client: redis.Redis, keys: JobKeys, settings: DedupSettings) -> None:
        self.keys = keys
        #: the caller's dedup settings until the join adopts the job's own (``adopt``)
        self.settings = settings
        #: the dedup mode the job stores (see dedup.py)
        self.job_mode = job_mode_for(settings.mode)
        self._layers_described = 1
        self._bloom_in_use = False  # the job's filter has a layer in use, as last seen
        self._exact_entries = 0  # the job's exact set, as last seen
        self._preparer = BloomPreparer(BloomPrepareScript(client, keys))
        self._migrate = DedupMigrateScript(client, keys)
        #: the last ``flush_dedup`` answer, with what it was made of
        self._flush_dedup: tuple[tuple[object, ...], FlushDedup] | None = None

    def adopt(self, job_mode: str, settings: DedupSettings) -> None:
        """Use the job's stored mode and settings from now on (what the join answered)."""
        self.job_mode, self.settings = job_mode, settings

    def params(self) -> BloomParams:
        return bloom_params(self.job_mode, self.settings.bloom_capacity,
                            self.settings.bloom_error_rate)

    def flush_dedup(self) -> FlushDedup:
        """What a flush call says of the dedup record: the job's mode and, for a Bloom job, the
        exact set's limit and the layers described (built again only when one of them changed:
        every flush says it, and the layers' chunk keys are many)."""
        made_of = (self.job_mode, self.settings, self._layers_described)
        if self._flush_dedup is not None and self._flush_dedup[0] == made_of:
            return self._flush_dedup[1]
        if self.settings.mode != "bloom":
            dedup = FlushDedup(self.job_mode)
        else:
            params = self.params()
            dedup = FlushDedup(self.job_mode, set_limit(params),
                               describe_layers(params, self._layers_described, self.keys))
        self._flush_dedup = (made_of, dedup)
        return dedup

    def observe(self, layers: int, active_entries: int, exact_entries: int) -> None:
        """Learn the dedup record's state from a script's answer."""
        self._layers_described = max(1, layers)
        self._bloom_in_use, self._exact_entries = layers > 0, exact_entries
        if self.settings.mode == "bloom":
            self._preparer.observe(self.params(), layers, active_entries, exact_entries)

    def grow_for_batch(self, epoch: str, exc: StoreError, prepared: int) -> int:
        """Describe or allocate the layer a refused batch needs; re-raise any other error.

        Returns the highest layer allocated for the batch so far (``prepared`` before it).
        """
        name, number = bloom_refusal(exc)
        if name == "CLUSTERSYNC_BLOOM_LAYOUT" and number > self._layers_described:
            self._layers_described = number  # the filter grew: describe more layers
            return prepared
        if name == "CLUSTERSYNC_BLOOM_NOT_READY" and number > prepared:
            self._preparer.prepare(epoch, self.params(), number)
            return number
        raise exc

    def step(self, epoch: str) -> bool:
        """One bounded step of the Bloom filter's upkeep, if one is due; True if more remain
        (see ``JobStore.prepare_bloom``)."""
        if self.settings.mode != "bloom":
            return False
        if self._preparer.step(epoch, self.params()):
            return True
        if not (self._bloom_in_use and self._exact_entries):
            return False
        return self._migrate_step(epoch)

    def _migrate_step(self, epoch: str) -> bool:
        """One dedup_migrate.lua call; True if the exact set still holds fingerprints."""
        prepared = -1
        while True:
            layers = describe_layers(self.params(), self._layers_described, self.keys)
            try:
                moved = self._migrate.run(epoch, MIGRATE_BATCH, self.job_mode, layers)
            except StoreError as exc:
                prepared = self.grow_for_batch(epoch, exc, prepared)
                continue
            self.observe(moved.layers, moved.active_entries, moved.left)
            return moved.left > 0
