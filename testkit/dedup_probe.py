"""Measuring a job's dedup record in Redis, for the Bloom tests and bench/bloom.py.

- `dedup_bytes`: what Redis holds for the record (MEMORY USAGE of every key of it: the exact
  set, the bloom hash and every chunk, those of a layer allocated ahead included).
- `false_positives`: how many fresh fingerprints the job's filter takes for seen, each asked
  through a real flush of the job, on the filter as it was: the record is restored after every
  ``window`` of them, so that measuring does not grow the filter it measures.
- `create_classic_job`: a Bloom job in the classic layout, created as the versions before the
  blocked layout created one (their join stores the mode "set-then-bloom").
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import redis

from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store import JobStore, Push
from scrapy_clustersync.store.dedup import SET_THEN_BLOOM
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.join_scripts import DedupRecord, JoinRequest, JoinScript
from scrapy_clustersync.store.keys import JobKeys


def dedup_keys(client: redis.Redis, keys: JobKeys) -> tuple[str, ...]:
    """Every key of the job's dedup record that exists now, once each (the bloom hash names
    the chunks of a layer in use twice: in its layout and in what was prepared)."""
    names = dict.fromkeys(DedupRecord.read(client, keys).keys)
    return tuple(name for name in names if client.exists(name))


def layer_of(keys: JobKeys, name: str) -> int | None:
    """The layer whose chunk key ``name`` is, or None for another key."""
    prefix = keys.bloom_chunk(0, 0).rsplit(":", 2)[0] + ":"
    return int(name[len(prefix):].split(":")[0]) if name.startswith(prefix) else None


def dedup_bytes(client: redis.Redis, keys: JobKeys, layers: int | None = None) -> int:
    """MEMORY USAGE of every key of the job's dedup record; with ``layers``, of the set, the
    hash and the chunks of the first ``layers`` layers only (the layers in use)."""
    names = dedup_keys(client, keys)
    if layers is not None:
        names = tuple(name for name in names
                      if (index := layer_of(keys, name)) is None or index < layers)
    return sum(client.memory_usage(name, samples=0) or 0 for name in names)


def false_positives(store: JobStore, epoch: str, fresh: Sequence[bytes], window: int) -> int:
    """How many of ``fresh`` (fingerprints never pushed) the job's filter calls seen.

    They are pushed ``window`` per flush, as a node pushes them; after each flush what a flush
    may write of the dedup record (the set, the bloom hash, the last layer in use and those
    after it: the earlier layers are full and never written) is put back as it was, so every
    window meets the filter as it stood before the measurement (a window adds to the filter
    what it checks, ``window`` entries at most).
    """
    client = store.client
    last = int(client.hget(store.keys.bloom, "layers") or 0) - 1
    saved: dict[str, bytes] = {}
    for name in dedup_keys(client, store.keys):
        index = layer_of(store.keys, name)
        value = client.dump(name) if index is None or index >= last else None
        if isinstance(value, bytes):
            saved[name] = value
    wrong = 0
    for start in range(0, len(fresh), window):
        ops = [Push(fp, 0, b"") for fp in fresh[start:start + window]]
        wrong += store.flush(epoch, ops, new_call_id()).filtered
        pipe = client.pipeline(transaction=False)
        for name, value in saved.items():
            pipe.restore(name, 0, value, replace=True)
        pipe.execute()
    return wrong


def create_classic_job(client: redis.Redis, job: str, capacity: int, error_rate: float) -> None:
    """Create Bloom job ``job`` as the versions before the blocked layout did: its layers are
    then classic for every node that joins it."""
    ask = JoinRequest("older-node", uuid.uuid4().hex, 0, False, SET_THEN_BLOOM,
                      DedupSettings("bloom", capacity, error_rate), "join")
    JoinScript(client, JobKeys(job)).run(ask, DedupRecord())
