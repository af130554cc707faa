"""Rates read from a site's access times: what the politeness tests and bench/polite.py judge."""

from __future__ import annotations


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
