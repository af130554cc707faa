"""The msgpack extension types of the request envelope (``codec.py``): the codes, and how the
values that are not requests or items (tuples, sets, dates and times, Decimals, big ints) turn
into an extension payload and back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from enum import IntEnum
from typing import Any
from zoneinfo import ZoneInfo

_MICROSECOND = dt.timedelta(microseconds=1)


class Ext(IntEnum):
    """The msgpack extension type codes of envelope versions 2 and 3; never renumber one."""

    TUPLE = 1
    SET = 2
    FROZENSET = 3
    DATETIME = 4
    DATE = 5
    TIME = 6
    TIMEDELTA = 7
    DECIMAL = 8
    BIG_INT = 9
    ITEM = 10
    REQUEST = 11


class CannotTravel(TypeError):
    """Raised from msgpack's ``default`` hook for a value that has no encoding."""

    def __init__(self, kind: str, advice: str) -> None:
        super().__init__(kind)
        self.kind, self.advice = kind, advice


def as_plain(value: object) -> Any:
    """A subclass of a plain type (OrderedDict, IntEnum, ...) as its base, or CannotTravel."""
    for base in PLAIN_BASES:
        if isinstance(value, base):
            return str.__str__(value) if base is str else base(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise CannotTravel(
        f"values of type {type(value).__name__}",
        "Use str, bytes, int, float, bool, None, list, tuple, set, dict, date/time, "
        "Decimal, Items or Requests.",
    )


# ---- the simple extension types: value -> (code, payload) and payload -> value ---------------
def _zone(value: dt.datetime | dt.time) -> Any:
    """The time zone of ``value`` as msgpack can hold it: None, an IANA key or an offset."""
    tz = value.tzinfo
    if tz is None:
        return None
    if isinstance(tz, ZoneInfo) and tz.key:
        return tz.key
    offset = value.utcoffset()
    if offset is None:
        raise CannotTravel(f"values with time zone {type(tz).__name__}", "Use zoneinfo.")
    name = value.tzname()
    # a fixed offset's own name (``UTC``, ``UTC+02:00``) is not stored: it comes back as it was
    return [offset // _MICROSECOND, None if name == dt.timezone(offset).tzname(None) else name]


def _zone_from(zone: Any) -> dt.tzinfo | None:
    if zone is None:
        return None
    if isinstance(zone, str):
        return ZoneInfo(zone)
    micros, name = zone
    offset = dt.timedelta(microseconds=micros)
    return dt.timezone(offset, name) if name else dt.timezone(offset)


def int_bytes(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)


SIMPLE_EXTS: tuple[tuple[type, Callable[[Any], tuple[int, Any]]], ...] = (
    (tuple, lambda v: (Ext.TUPLE, list(v))),
    (frozenset, lambda v: (Ext.FROZENSET, list(v))),
    (set, lambda v: (Ext.SET, list(v))),
    (dt.datetime, lambda v: (Ext.DATETIME, [v.replace(tzinfo=None).isoformat(), v.fold,
                                            _zone(v)])),
    (dt.date, lambda v: (Ext.DATE, v.isoformat())),
    (dt.time, lambda v: (Ext.TIME, [v.replace(tzinfo=None).isoformat(), v.fold, _zone(v)])),
    (dt.timedelta, lambda v: (Ext.TIMEDELTA, [v.days, v.seconds, v.microseconds])),
    (Decimal, lambda v: (Ext.DECIMAL, str(v))),
)
SIMPLE_DECODERS: dict[int, Callable[[Any], Any]] = {
    Ext.TUPLE: tuple,
    Ext.SET: set,
    Ext.FROZENSET: frozenset,
    Ext.DATETIME: lambda v: dt.datetime.fromisoformat(v[0]).replace(
        fold=v[1], tzinfo=_zone_from(v[2])),
    Ext.DATE: dt.date.fromisoformat,
    Ext.TIME: lambda v: dt.time.fromisoformat(v[0]).replace(fold=v[1], tzinfo=_zone_from(v[2])),
    Ext.TIMEDELTA: lambda v: dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    Ext.DECIMAL: Decimal,
    Ext.BIG_INT: lambda v: int.from_bytes(v, "big", signed=True),
}
PLAIN_BASES: tuple[type, ...] = (int, str, bytes, float, list, dict)
