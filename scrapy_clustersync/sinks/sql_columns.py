"""The columns of a sink's table: the fixed ones, and with ``--columns`` one per top-level item
field, named and typed from the first value seen (docs/results-readers.md).

A field's column is its name in lower case with every character but letters, digits and ``_``
made ``_`` (a leading digit gets ``f_``, a fixed column's name ``item_``), at most 60
characters; two fields that come to one name share the first one's column. Its type comes
from the first value's JSON form: a bool ``boolean``, an int ``bigint``, a float ``double``,
anything else ``text`` (a str as it is, lists, maps and the rest as their JSON text). A later
value that does not fit its column's type is stored as NULL there; the whole item is always
in the ``item`` column.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Column, DateTime, Double, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeEngine

#: the columns every sink table has
FIXED = ("id", "kind", "url", "node", "crawled_at", "item")
#: item fields that get a column of their own at most (the rest are in ``item`` only)
MAX_ITEM_COLUMNS = 200
MAX_NAME_CHARS = 60
#: a result id's most characters (``<fingerprint hex>:<n>``: about 45)
ID_CHARS = 255
#: text of any length (TEXT holds 64 KiB on MySQL/MariaDB)
LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
KIND_TYPES: dict[str, TypeEngine[Any]] = {
    "bool": Boolean(), "int": BigInteger(), "float": Double(), "text": LONG_TEXT,
}
_NOT_WORD = re.compile(r"[^a-z0-9_]")
_INT64 = 2**63


def fixed_columns() -> list[Column[Any]]:
    """The fixed columns: ``id`` (the result id, the primary key), ``kind``, ``url``,
    ``node``, ``crawled_at`` (UTC) and ``item`` (the result's map as JSON; JSONB on
    PostgreSQL)."""
    return [
        Column("id", String(ID_CHARS), primary_key=True),
        Column("kind", String(16), nullable=False),
        Column("url", LONG_TEXT),
        Column("node", String(255)),
        Column("crawled_at", DateTime(timezone=True).with_variant(
            mysql.DATETIME(fsp=3), "mysql", "mariadb")),
        Column("item", JSON().with_variant(JSONB(), "postgresql")),
    ]


def storable(value: Any, nul_free: bool = False) -> Any:
    """``value`` (in its JSON form) as every database takes it: a float that is not finite
    (NaN, infinity: no JSON, and no MySQL double holds one) made None, and with ``nul_free``
    (PostgreSQL, which refuses NUL in text and jsonb) every NUL of its strings, keys too, made
    U+FFFD; one such item would otherwise stop the sink for good."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if nul_free else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable(key, nul_free): storable(item, nul_free)
                for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item, nul_free) for item in value]
    return value


def column_name(field: str) -> str:
    """The column of item field ``field`` (see the module's docstring)."""
    name = _NOT_WORD.sub("_", field.lower())[:MAX_NAME_CHARS] or "_"
    if name[0].isdigit():
        name = "f_" + name[:MAX_NAME_CHARS - 2]
    if name in FIXED:
        name = "item_" + name
    return name


def value_kind(value: Any) -> str:
    """The column kind of a first value (already in its JSON form)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -_INT64 <= value < _INT64 else "text"
    if isinstance(value, float):
        return "float"
    return "text"


def kind_of_type(sql_type: TypeEngine[Any]) -> str:
    """The column kind of a column found in an existing table."""
    python_type: Any
    try:
        python_type = sql_type.python_type
    except NotImplementedError:
        return "text"
    if python_type is bool:
        return "bool"
    if python_type is int:
        return "int"
    if python_type is float or getattr(python_type, "__name__", "") == "Decimal":
        return "float"
    return "text"


def fit(value: Any, kind: str) -> Any:
    """``value`` (in its JSON form) as a column of ``kind`` holds it: None if it does not
    fit (a str in a bigint column); text columns take any value (non-str as JSON text)."""
    if value is None:
        return None
    if kind == "text":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind == "int":
        if isinstance(value, float):
            return int(value) if value.is_integer() and abs(value) < _INT64 else None
        return value if -_INT64 <= value < _INT64 else None
    return float(value)
