"""The format of one result in the job's ``results`` stream, for the writer and every reader.

A stream entry's fields (every value bytes):

- ``v``  the format version, ``1``
- ``k``  the kind: ``item``, ``error`` or ``page``
- ``id`` the result id, deterministic: ``<request fingerprint hex>:<n>`` for the n-th item
  (0-based) of a request's callback output, ``<fp hex>:error`` for an error record,
  ``<fp hex>:page`` for a raw page, ``start:<n>`` for the n-th item ``start()`` yielded
- ``d``  msgpack of ``{"url", "spider", "node", "at_ms", <kind>: data}``, packed with the
  project's extension types (codec_exts: tuples, sets, dates and times, Decimals and big ints
  round-trip), never pickle

This module is pure: no Redis. The stream entry's id (the reader's cursor) is
``Result.stream_id``; a result being written has none yet (``""``).
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgpack

from ..codec_exts import SIMPLE_DECODERS, SIMPLE_EXTS, CannotTravel, Ext, as_plain, int_bytes

FORMAT_VERSION = b"1"
KINDS = ("item", "error", "page")
__all__ = ["FORMAT_VERSION", "CannotTravel", "KINDS", "DataEncoder", "Result", "decode_record",
           "encode_data", "encode_record", "pack_data", "to_json_value", "unpack_data"]


@dataclass(frozen=True)
class Result:
    """One result: an item, an error record or a raw page.

    ``data`` is the item's fields (kind item), ``{"status", "error", "attempts", "errback"}``
    (kind error) or ``{"status", "headers", "body", "encoding"}`` (kind page; ``body`` is the
    zlib-compressed page). ``at_ms`` is the writing node's wall clock in ms.
    """

    stream_id: str
    id: str
    kind: str
    url: str | None
    spider: str
    node: str
    at_ms: int
    data: dict[str, Any]

    @property
    def crawled_at(self) -> dt.datetime:
        """``at_ms`` as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self.at_ms / 1000, tz=dt.timezone.utc)


# ---- msgpack with the project's extension types ---------------------------------------------
def _to_ext(value: Any) -> Any:
    """msgpack's ``default`` hook: an extension type for ``value``, its plain base, or
    CannotTravel (a TypeError)."""
    if type(value) is int:  # msgpack calls the hook for an int beyond 64 bits
        return msgpack.ExtType(Ext.BIG_INT, pack_data(int_bytes(value)))
    for kind, convert in SIMPLE_EXTS:
        if isinstance(value, kind):
            code, payload = convert(value)
            return msgpack.ExtType(code, pack_data(payload))
    return as_plain(value)


def _from_ext(code: int, payload: bytes) -> Any:
    build = SIMPLE_DECODERS.get(code)
    if build is None:
        raise ValueError(f"unknown extension type {code} in a result")
    return build(unpack_data(payload))


def pack_data(value: Any) -> bytes:
    """``value`` as msgpack with the extension types; raises CannotTravel (a TypeError) for a
    value of a type that has no encoding (say, a Request or an open file)."""
    packed: bytes = msgpack.packb(value, use_bin_type=True, strict_types=True, default=_to_ext)
    return packed


def unpack_data(blob: bytes) -> Any:
    """The value ``pack_data`` packed; raises ValueError (and its subclasses) on bad input."""
    return msgpack.unpackb(blob, raw=False, strict_map_key=False, ext_hook=_from_ext)


# ---- one stream entry -----------------------------------------------------------------------
def encode_record(result: Result) -> dict[bytes, bytes]:
    """The XADD fields of ``result`` (its ``stream_id`` is ignored).

    Raises ValueError for an unknown kind and CannotTravel (a TypeError) for data that holds
    a value with no encoding.
    """
    blob = encode_data(result.kind, result.url, result.spider, result.node, result.at_ms,
                       result.data)
    return {b"v": FORMAT_VERSION, b"k": result.kind.encode(), b"id": result.id.encode(),
            b"d": blob}


def encode_data(kind: str, url: str | None, spider: str, node: str, at_ms: int,
                data: dict[str, Any]) -> bytes:
    """The ``d`` field of a result (``encode_record``'s, without building a Result)."""
    if kind not in KINDS:
        raise ValueError(f"unknown result kind {kind!r}")
    return pack_data({"url": url, "spider": spider, "node": node, "at_ms": at_ms, kind: data})


class DataEncoder:
    """``encode_data`` for a writer that encodes many results on one thread: it keeps one
    msgpack packer, where each ``msgpack.packb`` builds and frees one (for a small item, most
    of its cost). Not thread-safe: one per thread."""

    def __init__(self) -> None:
        # the extension types' payloads are packed by pack_data, with a packer of their own:
        # this one is never re-entered; it empties itself when a value cannot be packed
        self._pack = msgpack.Packer(use_bin_type=True, strict_types=True, default=_to_ext).pack

    def data(self, kind: str, url: str | None, spider: str, node: str, at_ms: int,
             data: dict[str, Any]) -> bytes:
        """What ``encode_data`` returns for these arguments, and raises as it does."""
        if kind not in KINDS:
            raise ValueError(f"unknown result kind {kind!r}")
        packed: bytes = self._pack({"url": url, "spider": spider, "node": node,
                                    "at_ms": at_ms, kind: data})
        return packed


def decode_record(stream_id: str | bytes, fields: dict[Any, Any]) -> Result:
    """The Result of one stream entry (``fields`` as redis-py returns them, bytes or str).

    Raises ValueError naming the stream id and what is wrong for an entry that is not a
    version 1 result.
    """
    sid = stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)
    try:
        if fields.keys() >= _BYTES_KEYS:  # as redis-py returns them: no key to convert
            return _decode(sid, {name: fields[key] for name, key in _FIELD_KEYS})
        return _decode(sid, {_text(key): value for key, value in fields.items()})
    except ValueError as exc:
        raise ValueError(f"result {sid}: {exc}") from None
    except (TypeError, KeyError, AttributeError, IndexError) as exc:
        raise ValueError(f"result {sid}: bad record ({type(exc).__name__}: {exc})") from None


_FIELD_KEYS = (("v", b"v"), ("k", b"k"), ("id", b"id"), ("d", b"d"))
_BYTES_KEYS = frozenset(key for _, key in _FIELD_KEYS)


def _decode(sid: str, fields: dict[str, Any]) -> Result:
    for name in ("v", "k", "id", "d"):
        if name not in fields:
            raise ValueError(f"no field {name!r}")
    version = _text(fields["v"])
    if version != FORMAT_VERSION.decode():
        raise ValueError(f"format version {version!r}; this version reads 1")
    kind = _text(fields["k"])
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    blob = fields["d"]
    data = unpack_data(blob if isinstance(blob, bytes) else str(blob).encode())
    if not isinstance(data, dict) or not isinstance(data.get(kind), dict):
        raise ValueError(f"field 'd' holds no {kind} map")
    url, at_ms = data.get("url"), data.get("at_ms")
    if url is not None and not isinstance(url, str) or type(at_ms) is not int:
        raise ValueError("field 'd' has a bad url or at_ms")
    return Result(stream_id=sid, id=_text(fields["id"]), kind=kind, url=url,
                  spider=str(data.get("spider", "")), node=str(data.get("node", "")),
                  at_ms=at_ms, data=data[kind])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---- JSON ------------------------------------------------------------------------------------
def to_json_value(value: Any) -> Any:
    """``value`` as what ``json.dumps`` writes: datetimes, dates and times in ISO 8601,
    timedeltas as seconds (float), Decimals as strings, bytes as base64, sets as sorted lists,
    tuples as lists, map keys as strings. Raises TypeError for any other type."""
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, dict):
        return {_json_key(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return _sorted_members(value)
    for kind, convert in _JSON_SCALARS:
        if isinstance(value, kind):
            return convert(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


_JSON_SCALARS: tuple[tuple[type | tuple[type, ...], Any], ...] = (
    ((dt.datetime, dt.date, dt.time), lambda v: v.isoformat()),
    (dt.timedelta, lambda v: v.total_seconds()),
    (Decimal, str),
    ((bytes, bytearray, memoryview), lambda v: base64.b64encode(bytes(v)).decode("ascii")),
)


def _sorted_members(value: set[Any] | frozenset[Any]) -> list[Any]:
    members = [to_json_value(item) for item in value]
    try:
        return sorted(members)
    except TypeError:  # mixed types: by type name, then by their text
        return sorted(members, key=lambda v: (type(v).__name__, repr(v)))


def _json_key(key: Any) -> str:
    """A map key as JSON text has it: a str as it is; None, a bool, a number as ``json.dumps``
    spells it as a key (``null``, ``true``, ``1.5``); anything else its value's text."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return "null" if key is None else "true" if key else "false"
    converted = to_json_value(key)
    return converted if isinstance(converted, str) else repr(converted)
