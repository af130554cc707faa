"""The Bloom filter's layout: memory near the minimum, summed error within the configured rate,
and the classic layout of earlier jobs unchanged.

Pure arithmetic; how the filter behaves in Redis is tested in tests/test_bloom.py.
"""

from __future__ import annotations

import math

import pytest

from scrapy_clustersync.store.bloom_layout import (
    PREPARE_AT_FILL,
    BloomParams,
    expected_error,
    layer,
)


def minimum_bits(error: float) -> float:
    """What a standard Bloom filter needs per entry at ``error``: 14.38 bits at 0.1%."""
    return -math.log(error) / math.log(2) ** 2


def bytes_per_url(params: BloomParams, urls: int) -> float:
    """What the filter holds in Redis for ``urls`` entries, the layer allocated ahead included."""
    held, left, index = 0, urls, 0
    while True:
        shape = layer(params, index)
        held += shape.bytes
        if left <= shape.capacity:
            if left >= PREPARE_AT_FILL * shape.capacity:
                held += layer(params, index + 1).bytes
            return held / urls
        left -= shape.capacity
        index += 1


@pytest.mark.parametrize("capacity", [10_000, 1_000_000, 10_000_000, 10**10])
def test_the_first_layer_costs_under_1_2_times_a_standard_filter_at_its_rate(
    capacity: int,
) -> None:
    first = layer(BloomParams(capacity, 0.001), 0)
    assert first.bits / capacity <= 1.2 * minimum_bits(first.error_rate)
    assert first.false_positive_rate(capacity) <= first.error_rate
    assert first.chunk_bytes < 512 * 2**20  # Redis's string limit


@pytest.mark.parametrize("blocked", [True, False])
def test_layers_keep_the_summed_error_within_the_configured_rate(blocked: bool) -> None:
    params = BloomParams(1000, 0.001, blocked)
    full = [layer(params, i).capacity for i in range(20 if blocked else 12)]
    assert expected_error(params, full) <= 0.001


@pytest.mark.parametrize("capacity", [50_000, 10_000_000])
def test_a_filter_grown_to_20_times_its_plan_costs_at_most_4_bytes_per_url(capacity: int) -> None:
    assert bytes_per_url(BloomParams(capacity, 0.001), 20 * capacity) <= 4
    assert bytes_per_url(BloomParams(capacity, 0.001, blocked=False), 20 * capacity) > 4.5


def test_a_blocked_layer_fits_its_blocks_in_whole_chunks() -> None:
    for index in range(8):
        shape = layer(BloomParams(50_000, 0.001), index)
        assert shape.chunk_bytes % 64 == 0 and shape.chunk_bytes > 0


def test_the_classic_layout_is_the_one_earlier_versions_computed() -> None:
    # nodes of earlier versions compute these layers themselves for the jobs they made: the
    # numbers are theirs (bits, hashes, chunk bytes, chunks), and must never change
    def shape(capacity: int, error: float, index: int) -> tuple[int, int, int, int]:
        each = layer(BloomParams(capacity, error, blocked=False), index)
        return each.bits, each.hashes, each.chunk_bytes, each.chunks

    assert shape(1000, 0.001, 0) == (64 * 8 * 30, 10, 64, 30)
    assert shape(1000, 0.001, 3) == (768 * 8 * 33, 17, 768, 33)
    assert shape(10_000_000, 0.001, 0) == (524_272 * 8 * 36, 10, 524_272, 36)
    assert shape(10_000_000, 0.001, 3) == (7_340_016 * 8 * 34, 17, 7_340_016, 34)
    assert shape(100, 1e-9, 3) == (128 * 8 * 42, 37, 128, 42)
