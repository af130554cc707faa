"""The job's dedup record as the store sees it: its stored mode, its Bloom layers' description
for the scripts, and what ``clustersync status`` shows of it.

A job's meta records how it records fingerprints (``dedup``), fixed when the job is created:

- ``exact``: a set of raw 20-byte fingerprints, forever (``CLUSTERSYNC_DEDUP = "exact"``);
- ``set-then-blocked-bloom``: the set while the job is small, then the Bloom filter in the
  blocked layout: the jobs this version creates with ``CLUSTERSYNC_DEDUP = "bloom"`` (see
  bloom_layout.py, ``set_limit``, lua/dedup_migrate.lua);
- ``set-then-bloom``: the same with the classic layout: Bloom jobs made by earlier versions,
  which keep that layout for every layer they grow, so that their nodes of an earlier version,
  which compute the layers themselves, still read and fill them alike.

The mode is the version of the filter's format: a node checks it when it joins and refuses a
job whose mode it does not read (``check_job_mode``), so a node of an earlier version stops at
the join of a blocked job (with one error line) instead of reading its layers wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .bloom_layout import BloomParams, expected_error, layer
from .errors import JobUnreadable, StoreError
from .keys import JobKeys
from .records import BloomLayout

SET_THEN_BLOCKED_BLOOM = "set-then-blocked-bloom"
SET_THEN_BLOOM = "set-then-bloom"
#: the CLUSTERSYNC_DEDUP value each stored mode stands for
SETTING_OF_JOB_MODE = {"exact": "exact", SET_THEN_BLOCKED_BLOOM: "bloom", SET_THEN_BLOOM: "bloom"}


@dataclass(frozen=True)
class LayersDescribed:
    """The Bloom layers a script call describes: how many, their chunk keys (layer by layer,
    chunk by chunk) and their layouts (``BloomLayout``'s five numbers per layer, in order)."""

    count: int = 0
    chunk_keys: tuple[str, ...] = ()
    layouts: tuple[int, ...] = ()


def job_mode_for(setting: str) -> str:
    """The mode a new job created with ``CLUSTERSYNC_DEDUP = setting`` stores."""
    return SET_THEN_BLOCKED_BLOOM if setting == "bloom" else setting


def bloom_params(job_mode: str, capacity: int, error_rate: float) -> BloomParams:
    """The filter plan of a Bloom job of stored mode ``job_mode``: blocked unless the job was
    made with the classic layout."""
    return BloomParams(capacity, error_rate, blocked=job_mode != SET_THEN_BLOOM)


def setting_of(job_mode: str) -> str:
    """The ``CLUSTERSYNC_DEDUP`` value of a job's stored mode (an unknown one as it is)."""
    return SETTING_OF_JOB_MODE.get(job_mode, job_mode)


def check_job_mode(job: str, job_mode: str) -> None:
    """Raise JobUnreadable if ``job_mode``, what job ``job`` stores, is no mode this version
    writes: the job was made by another program, and its fingerprints cannot be read."""
    if job_mode not in SETTING_OF_JOB_MODE:
        raise JobUnreadable(
            f"job {job!r} records its fingerprints as {job_mode!r}, which this version does "
            f"not read (it writes {', '.join(map(repr, SETTING_OF_JOB_MODE))}); "
            "`clustersync purge` the job to crawl it afresh")


def describe_layers(params: BloomParams, count: int, keys: JobKeys) -> LayersDescribed:
    """The first ``count`` layers of the filter of ``params``, as a script call describes them."""
    chunk_keys: list[str] = []
    layouts: list[int] = []
    for index in range(count):
        each = layer(params, index)
        layouts.extend(BloomLayout.of(each))
        chunk_keys.extend(keys.bloom_chunk(index, c) for c in range(each.chunks))
    return LayersDescribed(count, tuple(chunk_keys), tuple(layouts))


def bloom_refusal(exc: StoreError) -> tuple[str, int]:
    """A script's refusal of a call for want of a Bloom layer: its name and number.

    ("CLUSTERSYNC_BLOOM_LAYOUT", layers to describe), ("CLUSTERSYNC_BLOOM_NOT_READY", layer to
    allocate), or ("", 0) for any other error.
    """
    text = str(exc)
    for name in ("CLUSTERSYNC_BLOOM_LAYOUT", "CLUSTERSYNC_BLOOM_NOT_READY"):
        if name in text:
            return name, int(text.split(name, 1)[1].split()[0])
    return "", 0


def bloom_chunks_of(keys: JobKeys, field: str, value: str) -> list[str]:
    """The chunk strings a field of the bloom hash accounts for: a layer in use or prepared."""
    if field.startswith("layout"):
        index, chunks = int(field[6:]), BloomLayout.parse(value).chunks
    elif field.startswith("prepared"):
        index, chunks = int(field[8:]), int(value)
    else:
        return []
    return [keys.bloom_chunk(index, c) for c in range(chunks)]


def dedup_status(meta: dict[str, str], bloom: dict[str, str], exact_seen: int) -> dict[str, Any]:
    """What ``clustersync status`` shows of the job's dedup record.

    For a Bloom job, ``entries`` counts the filter's and the exact set's fingerprints
    (``exact_entries``), and ``stage`` says where new ones go: "exact set", "moving to the
    filter" (the set's fingerprints move while new ones go to the filter) or "filter".
    """
    mode = setting_of(meta.get("dedup", "exact"))
    if mode != "bloom":
        return {"mode": mode, "entries": exact_seen}
    layers = int(bloom.get("layers", 0))
    counts = [int(bloom.get(f"count{i}", 0)) for i in range(layers)]
    sizes = [BloomLayout.parse(bloom[f"layout{i}"]).size_bytes for i in range(layers)]
    params = bloom_params(meta["dedup"], int(meta["bloom_capacity"]), float(meta["bloom_error"]))
    ahead = [int(value) * layer(params, int(field[8:])).chunk_bytes
             for field, value in bloom.items()
             if field.startswith("prepared") and int(field[8:]) >= layers]
    stage = "exact set" if not layers else "moving to the filter" if exact_seen else "filter"
    return {
        "mode": "bloom", "layout": "blocked" if params.blocked else "classic", "stage": stage,
        "entries": sum(counts) + exact_seen,
        "exact_entries": exact_seen, "layers": layers, "bytes": sum(sizes),
        "prepared_bytes": sum(ahead),
        "capacity": params.capacity, "configured_error_rate": params.error_rate,
        "expected_error_rate": expected_error(params, counts),
    }
