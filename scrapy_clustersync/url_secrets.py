"""The secrets a Redis URL can carry, and how to keep them out of logs, errors and output.

redis-py takes a password from the URL's userinfo (``redis://user:PASSWORD@host``) and from its
query (``redis://host/0?password=PASSWORD``, the usual form for ``unix://`` sockets): every query
parameter becomes a keyword of the connection, so any of them may be a credential
(``password``, ``ssl_password``, ...). ``redact_url`` masks all of them; ``scrub`` masks the same
values wherever they appear in a message (a redis-py error, a URL it quotes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

MASK = "***"

#: query parameters redis-py reads that never carry a secret: shown as given. Every other
#: parameter's value is masked (an unknown one may be a credential some redis-py version reads).
PUBLIC_QUERY_NAMES = frozenset({
    "db", "username", "client_name", "protocol", "timeout", "socket_timeout",
    "socket_connect_timeout", "socket_read_size", "socket_keepalive", "retry_on_timeout",
    "retry_on_error", "max_connections", "health_check_interval", "ssl_check_hostname",
    "ssl_cert_reqs", "ssl_min_version", "ssl_include_verify_flags", "ssl_exclude_verify_flags",
    "legacy_responses", "decode_responses", "encoding",
})

#: a password in a URL's userinfo, for text that does not parse as a URL
_USERINFO_PASSWORD = re.compile(r"(://[^:/?#@\s]*:)[^@/?#\s]*@")
#: a query value, for text that does not parse as a URL
_QUERY_VALUE = re.compile(r"([?&][^=&#\s]+=)[^&#\s]*")


def redact_url(url: str) -> str:
    """``url`` with every secret it carries replaced by ``***``: the userinfo password and the
    value of every query parameter that may be a credential (see ``PUBLIC_QUERY_NAMES``), for
    ``redis://``, ``rediss://`` and ``unix://`` alike. Never raises."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.split(':', 1)[0]}:{MASK}@{host}"
        query = "&".join(_redacted_pair(pair) for pair in parts.query.split("&")) \
            if parts.query else ""
        return _joined(url, parts.scheme, netloc, parts.path, query, parts.fragment)
    except ValueError:  # not a URL urllib can split: mask by pattern
        return _QUERY_VALUE.sub(rf"\g<1>{MASK}", _USERINFO_PASSWORD.sub(rf"\g<1>{MASK}@", url))


def _joined(url: str, scheme: str, netloc: str, path: str, query: str, fragment: str) -> str:
    """The URL of these parts; ``unix:///path`` keeps its empty authority (urlunsplit drops it)."""
    authority = "//" if url[len(scheme) + 1:].startswith("//") else ""
    text = f"{scheme}:{authority}{netloc}{path}" if scheme else f"{authority}{netloc}{path}"
    return text + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")


def _redacted_pair(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    if not equals or unquote_plus(name).strip().lower() in PUBLIC_QUERY_NAMES:
        return pair
    return f"{name}={MASK}"


def url_secrets(url: str) -> list[str]:
    """The secret values ``url`` carries, as written and decoded (what ``scrub`` masks)."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            if name.strip().lower() not in PUBLIC_QUERY_NAMES:
                found += [value, quote(value, safe=""), quote_plus(value)]
    except ValueError:
        pass
    return found


def scrub(text: str, secrets: Iterable[str | bytes | None]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``***`` (the longest
    first, so that a secret holding another is masked whole)."""
    values = {s.decode(errors="replace") if isinstance(s, bytes) else s for s in secrets if s}
    for secret in sorted(values, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def scrub_url_secrets(text: str, url: str) -> str:
    """``text`` (a message about the Redis at ``url``) without the secrets of ``url``."""
    return scrub(text, url_secrets(url))
