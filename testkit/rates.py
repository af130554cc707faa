"""Rates read from a site's access times, counters read between two times, and the percentiles
of measured times: what the politeness tests and the bench scripts judge."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence


def rate_per_s(times: list[float]) -> float:
    """Requests per second over the span of ``times`` (sorted)."""
    return (len(times) - 1) / (times[-1] - times[0])


def most_in_window(times: list[float], window_s: float) -> int:
    """The most requests in any ``window_s`` long window of ``times`` (sorted)."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] > window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def rate_between(times: list[float], start: float, end: float) -> float:
    """Requests per second of ``times`` (sorted) that fall in ``start``..``end``."""
    if end <= start:
        raise ValueError(f"an empty window: {start}..{end}")
    return (bisect_right(times, end) - bisect_left(times, start)) / (end - start)


def steady_window(times: list[float], since: float, warmup_s: float,
                  cut_at: float | None) -> tuple[float, float] | None:
    """The window a crawl's steady rate is read over: from ``warmup_s`` after ``since`` (its
    first page) to ``cut_at`` (when it was stopped) or, for a crawl that ran to its end
    (``cut_at`` None), to the time of its 90th-percentile request of ``times`` (sorted), so that
    its tail, when the last pages are found one by one, is left out. None if nothing is left."""
    start = since + warmup_s
    if cut_at is not None:
        end = cut_at
    elif times:
        end = times[len(times) * 9 // 10]
    else:
        return None
    return (start, end) if end > start else None


def growth_between(samples: Sequence[tuple[float, float]], start: float,
                   end: float) -> float | None:
    """How much a growing counter sampled as ``samples`` ((time, value), in time order) grew
    from ``start`` to ``end``, read linearly between the samples around each (bench/broad.py:
    the nodes' CPU over a crawl's steady window, start-up and stopping left out). None unless
    the samples cover ``start``..``end``."""
    if not samples or not samples[0][0] <= start <= end <= samples[-1][0]:
        return None
    return _value_at(samples, end) - _value_at(samples, start)


def _value_at(samples: Sequence[tuple[float, float]], at: float) -> float:
    after = bisect_left(samples, at, key=lambda sample: sample[0])
    (t1, v1), (t0, v0) = samples[after], samples[max(0, after - 1)]
    return v1 if t1 == t0 else v0 + (v1 - v0) * (at - t0) / (t1 - t0)


def percentile(values: Sequence[float], share: float) -> float:
    """The value ``share`` (0..1) of the way up the sorted ``values`` (nearest rank below; 0.0
    for none)."""
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))] if ordered else 0.0
