"""The URLs most seeds are made of, recognised in one regular expression: an http(s) URL of a
lowercase host name, a path of unreserved characters and a query of sorted ``key=value`` pairs.

Such a URL is already what ``safe_url_string`` and ``canonicalize_url`` make of it, so its
Scrapy fingerprint and its check need neither (together about 20 us a URL, most of a seed's
time). Anything else (capitals, percent escapes, dot segments, a fragment, user info, a blank
query value, unsorted pairs, non-ASCII) takes the general path; ``tests/unit/test_seed.py``
checks that both paths agree on URLs of every such kind.
"""

from __future__ import annotations

import hashlib
import re

#: a path segment that is not "." or "..": unreserved characters, not starting with a dot
_SEGMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
#: a query pair canonicalize_url leaves as it is (its key and value need no quoting)
_PAIR = r"[A-Za-z0-9_.~-]+=[A-Za-z0-9_.~-]*"
PLAIN_URL = re.compile(
    rf"(?:https?)://([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::[1-9][0-9]{{0,4}})?"
    rf"(?:/(?:{_SEGMENT})?)+(?:\?{_PAIR}(?:&{_PAIR})*)?")

_FINGERPRINT_JSON = '{"body": "", "headers": {}, "method": "GET", "url": "%s"}'


def plain_host(url: str) -> str | None:
    """The host of ``url`` if it is a plain URL (its own canonical form), else None."""
    match = PLAIN_URL.fullmatch(url)
    if match is None:
        return None
    query = url.partition("?")[2]
    if "&" in query:
        pairs = [tuple(pair.split("=", 1)) for pair in query.split("&")]
        if pairs != sorted(pairs):
            return None
    return match.group(1)


def plain_fingerprint(url: str) -> bytes:
    """Scrapy's default fingerprint of a GET of the plain URL ``url`` (``plain_host`` said so):
    the SHA-1 of the JSON Scrapy hashes, whose URL needs no escaping here."""
    return hashlib.sha1((_FINGERPRINT_JSON % url).encode()).digest()  # noqa: S324
