"""The Bloom filter's layout: memory near the minimum, summed error within the configured rate.

Pure arithmetic; how the filter behaves in Redis is tested in tests/test_bloom.py.
"""

from __future__ import annotations

import math

import pytest

from scrapy_clustersync.store.bloom_layout import BloomParams, expected_error, layer

THEORETICAL_BITS_AT_0_1_PERCENT = -math.log(0.001) / math.log(2) ** 2  # 14.38


@pytest.mark.parametrize("capacity", [10_000, 1_000_000, 10_000_000, 10**10])
def test_layer_zero_costs_under_1_1_times_the_minimum(capacity: int) -> None:
    first = layer(BloomParams(capacity, 0.001), 0)
    assert first.bits / capacity <= 1.1 * THEORETICAL_BITS_AT_0_1_PERCENT
    assert first.false_positive_rate(capacity) <= first.error_rate
    assert first.chunk_bytes < 512 * 2**20  # Redis's string limit


def test_layers_keep_the_summed_error_within_the_configured_rate() -> None:
    params = BloomParams(1000, 0.001)
    full = [layer(params, i).capacity for i in range(12)]
    assert expected_error(params, full) <= 0.001
