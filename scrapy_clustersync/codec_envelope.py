"""The envelope of a queue entry, version by version (the format codec.py's docstring
describes): which fields of a request travel, and the envelope's bytes around them.

Only codec.py builds requests from these fields; the store reads an entry's URL and priority
with ``request_fields``, which builds nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgpack
from scrapy import Request

ENVELOPE_VERSION = 3
#: the envelope versions this node reads: its own and 0.1.0's
READ_VERSIONS = (2, ENVELOPE_VERSION)


class UndecodableEntry(ValueError):
    """A queue entry cannot be turned back into a request; it goes to the dead letters."""


def _plain_fields() -> dict[str, Any]:
    fields = Request("http://plain.invalid/").to_dict()
    del fields["url"], fields["callback"]
    return fields


#: the attributes of a plain ``Request(url)`` but its URL and callback, as ``to_dict`` gives
#: them; version 3 stores a request's attribute only when it differs from this
PLAIN_FIELDS = _plain_fields()
#: the fields of a request the encoder reads in its own way, not by comparing its attribute
_OWN_WAY = frozenset({"url", "callback", "errback", "headers", "meta"})
#: the fields of a version 3 entry that stores none (never changed)
NO_FIELDS: dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the attributes of one Request class travel in version 3."""

    #: (attribute, its plain value): stored when the request's value differs, by value or type
    compared: tuple[tuple[str, Any], ...]
    #: attributes a plain Request lacks (``JsonRequest.dumps_kwargs``): always stored
    extra: tuple[str, ...]
    #: the fields an entry of this class may hold
    accepted: frozenset[str]


_LAYOUTS: dict[type[Request], Layout] = {}


def layout_of(cls: type[Request]) -> Layout:
    """The layout of ``cls``, made on first use."""
    found = _LAYOUTS.get(cls)
    if found is None:
        names = [name for name in cls.attributes if name not in ("url", "callback")]
        found = _LAYOUTS[cls] = Layout(
            compared=tuple((name, PLAIN_FIELDS[name]) for name in names
                           if name in PLAIN_FIELDS and name not in _OWN_WAY),
            extra=tuple(name for name in names if name not in PLAIN_FIELDS),
            accepted=frozenset(names),
        )
    return found


_V3_HEAD: bytes = msgpack.packb([ENVELOPE_VERSION, b""], use_bin_type=True)[:2]


def envelope(payload: bytes) -> bytes:
    """``[ENVELOPE_VERSION, payload]`` in msgpack, as ``packb`` makes it (faster)."""
    size = len(payload)
    if size < 1 << 8:
        head = b"\xc4" + size.to_bytes(1, "big")
    elif size < 1 << 16:
        head = b"\xc5" + size.to_bytes(2, "big")
    else:
        head = b"\xc6" + size.to_bytes(4, "big")
    return _V3_HEAD + head + payload


def trimmed(url: str, callback: str | None, fields: dict[str, Any]) -> list[Any]:
    """``[url, callback, fields]`` without its empty end (what ``split_fields`` reads)."""
    if fields:
        return [url, callback, fields]
    return [url] if callback is None else [url, callback]


def split_fields(fields: Any) -> tuple[str, str | None, dict[str, Any]]:
    """The URL, callback name and other fields of a version 3 ``[url, callback, fields]``."""
    if not (isinstance(fields, list) and 1 <= len(fields) <= 3):
        raise UndecodableEntry("not [url, callback, fields] request fields")
    url = fields[0]
    callback = fields[1] if len(fields) > 1 else None
    changed = fields[2] if len(fields) > 2 else NO_FIELDS
    if not isinstance(url, str):
        raise UndecodableEntry("request data without a url")
    if not (callback is None or isinstance(callback, str)) or not isinstance(changed, dict):
        raise UndecodableEntry("not [url, callback, fields] request fields")
    return url, callback, changed


def envelope_of(blob: bytes) -> tuple[int, Any]:
    """The version and payload of the envelope ``blob`` (its extension types not decoded), or
    :class:`UndecodableEntry` if it is none or of a version this node does not read."""
    try:
        unpacked = msgpack.unpackb(blob, raw=False, strict_map_key=False)
    except Exception as exc:
        raise UndecodableEntry(f"not a msgpack envelope: {exc}") from None
    if not (isinstance(unpacked, list) and len(unpacked) == 2):
        raise UndecodableEntry("not a [version, request] envelope")
    version, payload = unpacked
    if type(version) is not int or version not in READ_VERSIONS:
        raise UndecodableEntry(
            f"envelope version {version!r}; this node reads versions "
            f"{' and '.join(map(str, READ_VERSIONS))}")
    return version, payload


def unpack_fields(payload: Any, ext_hook: Callable[[int, bytes], Any]) -> Any:
    """The fields in the payload of a version 3 envelope, each extension value built by
    ``ext_hook``. msgpack caps every length inside by the payload's."""
    if not isinstance(payload, bytes):
        raise UndecodableEntry("a version 3 envelope without the bytes of its request")
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=ext_hook)
    except UndecodableEntry:
        raise
    except Exception as exc:
        raise UndecodableEntry(f"not msgpack request fields: {exc}") from None


def v2_data(blob: bytes, ext_hook: Callable[[int, bytes], Any]) -> dict[str, Any]:
    """The ``to_dict`` map of the version 2 envelope ``blob``, read with ``ext_hook``."""
    try:
        data = msgpack.unpackb(blob, raw=False, strict_map_key=False, ext_hook=ext_hook)[1]
    except UndecodableEntry:
        raise
    except Exception as exc:
        raise UndecodableEntry(f"not a msgpack envelope: {exc}") from None
    return _with_url(data)


def _with_url(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise UndecodableEntry("request data without a url")
    return data


def request_fields(blob: bytes) -> dict[str, Any]:
    """The fields stored in the envelope ``blob``, of any version this node reads, as a map:
    ``url``, ``callback`` and the others (in version 3 only those that differ from a plain
    Request's: ``.get("priority", 0)``). Extension values stay msgpack ``ExtType``: reading
    them builds nothing. :class:`UndecodableEntry` if ``blob`` is no such envelope."""
    version, payload = envelope_of(blob)
    if version != ENVELOPE_VERSION:
        return _with_url(payload)
    url, callback, changed = split_fields(unpack_fields(payload, msgpack.ExtType))
    return {"url": url, "callback": callback, **changed}
