"""Rates read from a site's access times: what the politeness tests, bench/polite.py and
bench/broad.py judge."""

from __future__ import annotations

from bisect import bisect_left, bisect_right


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
