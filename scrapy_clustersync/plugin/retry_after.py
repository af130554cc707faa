"""``Retry-After``: how long a site asks to be left alone (RFC 9110, section 10.2.3)."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

#: the longest Retry-After taken as given (a site asking more is left alone this long)
RETRY_AFTER_MAX_S = 3600.0


def retry_after_s(value: bytes | str | None, now: float | None = None) -> float | None:
    """Seconds from ``now`` (``time.time()``) that a ``Retry-After`` value asks for: a number of
    seconds or an HTTP date; None if absent or unreadable; at most ``RETRY_AFTER_MAX_S``."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return min(float(text), RETRY_AFTER_MAX_S)
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    wait = when - (time.time() if now is None else now)
    return min(max(0.0, wait), RETRY_AFTER_MAX_S)
