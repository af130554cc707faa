"""``clustersync sink --to postgresql://|mysql://|sqlite:///``: results into one table per job,
with SQLAlchemy Core.

Each batch is deduplicated by result id and upserted in one transaction (INSERT ... ON
CONFLICT DO UPDATE; ON DUPLICATE KEY UPDATE on MySQL/MariaDB, its rows handed to the driver's
executemany, driver_upsert.py; through COPY on PostgreSQL with psycopg 3, pg_copy.py): a batch
delivered again (its sink died after the commit, before the acknowledgement) rewrites the same
rows, so the table holds every result exactly once. The table is created if missing
(sql_columns.py has its columns); with ``--columns`` it is widened (ALTER TABLE ADD COLUMN) as
new item fields come.
"""

from __future__ import annotations

import functools
import logging
import re
from datetime import timezone
from typing import Any

from sqlalchemy import Column, MetaData, Table, create_engine, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from ..results.record_format import Result, to_json_value
from .destination_errors import DestinationFailed, DestinationUnusable
from .driver_upsert import DriverUpsert
from .pg_copy import copy_upsert
from .sql_columns import (
    KIND_TYPES,
    MAX_ITEM_COLUMNS,
    fit,
    fixed_columns,
    json_text,
    kind_of_type,
    storable,
    value_kind,
)
from .sql_columns import column_name as field_column

logger = logging.getLogger(__name__)

#: URL schemes and the SQLAlchemy driver each gets (a URL naming its driver keeps it)
DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg",
           "mysql": "mysql+pymysql", "mariadb": "mysql+pymysql", "sqlite": "sqlite"}
MAX_TABLE_CHARS = 60
_NOT_WORD = re.compile(r"[^a-z0-9_]")


def table_name(job: str) -> str:
    """A job's default table: its name in lower case, other characters than letters, digits
    and ``_`` made ``_``, ``t_`` before a leading digit, at most 60 characters."""
    name = _NOT_WORD.sub("_", job.lower())[:MAX_TABLE_CHARS] or "results"
    return "t_" + name if name[0].isdigit() else name


def engine_url(url: str) -> str:
    """``url`` with the driver this package installs (``postgresql://`` ->
    ``postgresql+psycopg://``); DestinationUnusable for a scheme that is no SQL database."""
    scheme, sep, rest = url.partition("://")
    base, _, driver = scheme.partition("+")
    if not sep or base not in DRIVERS:
        raise DestinationUnusable(f"unsupported destination scheme {scheme + sep!r}")
    return url if driver else f"{DRIVERS[base]}://{rest}"


def open_engine(url: str, nul_free: bool = False) -> Engine:
    """An engine for ``url`` (its JSON written by ``json_text``; ``nul_free``: NUL made
    U+FFFD, as PostgreSQL needs), its database reached once (DestinationFailed if it cannot be,
    DestinationUnusable for a bad URL or a driver that is not installed)."""
    try:
        engine = create_engine(engine_url(url), pool_pre_ping=True,
                               json_serializer=functools.partial(json_text, nul_free=nul_free))
        with engine.connect():
            pass
    except (ArgumentError, NoSuchModuleError, ModuleNotFoundError) as exc:
        raise DestinationUnusable(f"{exc} (pip install 'scrapy-clustersync[sinks]')") from None
    except DBAPIError as exc:
        raise DestinationFailed(f"cannot reach {safe_url(url)}: {first_line(exc)}") from None
    return engine


def safe_url(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1]


def first_line(exc: BaseException) -> str:
    """The driver's own message of a database error, on one line."""
    origin = getattr(exc, "orig", None) or exc
    return " ".join(str(origin).split()) or type(origin).__name__


class SqlSink:
    """Upserts results into one table (see the module). Raises DestinationFailed when the
    database fails (nothing of that batch is acknowledged then)."""

    def __init__(self, url: str, table: str, item_columns: bool = False) -> None:
        self.engine = open_engine(url, nul_free=engine_url(url).startswith("postgres"))
        self.dialect = self.engine.dialect.name
        self._nul_free = self.dialect == "postgresql"
        self._copy = self.engine.dialect.driver == "psycopg"  # pg_copy.py
        #: what the driver raises where SQLAlchemy does not wrap it (pg_copy's raw cursor)
        self._driver_errors: tuple[type[Exception], ...] = (
            DBAPIError, getattr(self.engine.dialect.loaded_dbapi, "Error", DBAPIError))
        self.item_columns = item_columns
        self.name = table
        #: item field -> (column, kind), from the table as found and as widened since
        self.fields: dict[str, tuple[str, str]] = {}
        self.columns: dict[str, str] = {}  # column -> kind, of the item fields' columns
        self._guard(self._prepare)
        self.table = self._table()
        self._compiled: tuple[Table, DriverUpsert] | None = None

    def write(self, results: list[Result]) -> int:
        """Upsert ``results`` in one transaction (the last of one id wins); answers the rows
        written. Once it returned, they are committed."""
        rows = {result.id: result for result in results}
        if not rows:
            return 0
        if self.item_columns:
            self._guard(lambda: self._widen(rows.values()))
        values = [self._row(result) for result in rows.values()]
        self._guard(lambda: self._upsert(values))
        return len(values)

    def close(self) -> None:
        self.engine.dispose()

    def _guard(self, action: Any) -> Any:
        try:
            return action()
        except self._driver_errors as exc:
            raise DestinationFailed(f"{safe_url(str(self.engine.url))} failed: "
                                    f"{first_line(exc)}") from None

    def _prepare(self) -> None:
        """Create the table if missing (a sink racing another one to it finds it made), then
        learn its item columns."""
        table = Table(self.name, MetaData(), *fixed_columns())
        try:
            table.create(self.engine, checkfirst=True)
        except DBAPIError:
            if not inspect(self.engine).has_table(self.name):
                raise
        self._learn_columns()

    def _learn_columns(self) -> None:
        fixed = {column.name for column in fixed_columns()}
        for column in inspect(self.engine).get_columns(self.name):
            if column["name"] not in fixed:
                self.columns[column["name"]] = kind_of_type(column["type"])

    def _table(self) -> Table:
        extra = [Column(name, KIND_TYPES[kind]) for name, kind in self.columns.items()
                 if self.item_columns]
        return Table(self.name, MetaData(), *fixed_columns(), *extra)

    def _widen(self, results: Any) -> None:
        """Add a column for each item field not seen before (up to MAX_ITEM_COLUMNS)."""
        added = False
        for result in results:
            if result.kind != "item":
                continue
            for field, value in result.data.items():
                if str(field) not in self.fields:
                    added |= self._add_field(str(field), to_json_value(value))
        if added:
            self.table = self._table()

    def _add_field(self, field: str, value: Any) -> bool:
        name = field_column(field)
        if name in self.columns:
            self.fields[field] = (name, self.columns[name])
            return False
        if len(self.columns) >= MAX_ITEM_COLUMNS:
            logger.warning("clustersync: table %s has %d item columns: field %r is only in "
                           "its item column", self.name, MAX_ITEM_COLUMNS, field)
            self.fields[field] = ("", "text")
            return False
        kind = value_kind(value)
        self._add_column(name, kind)
        self.fields[field] = (name, self.columns[name])
        return True

    def _add_column(self, name: str, kind: str) -> None:
        preparer = self.engine.dialect.identifier_preparer
        sql_type = KIND_TYPES[kind].compile(dialect=self.engine.dialect)
        ddl = (f"ALTER TABLE {preparer.quote(self.name)} ADD COLUMN "
               f"{preparer.quote(name)} {sql_type}")
        try:
            with self.engine.begin() as conn:
                conn.execute(text(ddl))
            self.columns[name] = kind
        except DBAPIError:  # another sink added it meanwhile: take the table as it is now
            self._learn_columns()
            if name not in self.columns:
                raise

    def _row(self, result: Result) -> dict[str, Any]:
        at = result.crawled_at
        row: dict[str, Any] = {
            "id": result.id, "kind": result.kind, "node": result.node,
            "crawled_at": at if self.dialect == "postgresql" else
            at.astimezone(timezone.utc).replace(tzinfo=None),
            "item": result.data,  # made JSON by json_text as it is written
            "url": storable(result.url, self._nul_free),
        }
        if not self.item_columns:
            return row
        row["item"] = storable(to_json_value(result.data), self._nul_free)
        row.update(dict.fromkeys(self.columns))
        if result.kind == "item":
            for field, value in row["item"].items():
                name, kind = self.fields.get(str(field), ("", "text"))
                if name and row[name] is None:
                    row[name] = fit(value, kind)
        return row

    def _upsert(self, values: list[dict[str, Any]]) -> None:
        with self.engine.begin() as conn:
            if self._copy:
                copy_upsert(conn, self.table, values)
            elif self.dialect in ("mysql", "mariadb"):
                self._driver_upsert().run(conn, values)
            else:
                conn.execute(self._statement(), values)

    def _driver_upsert(self) -> DriverUpsert:
        """The table's upsert compiled for the driver (driver_upsert.py), anew once the table
        gained columns."""
        if self._compiled is None or self._compiled[0] is not self.table:
            upsert = DriverUpsert(self._statement(), self.engine.dialect, self._nul_free)
            self._compiled = (self.table, upsert)
        return self._compiled[1]

    def _statement(self) -> Any:
        names = [c.name for c in self.table.columns if c.name != "id"]
        if self.dialect in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import insert as mysql_insert
            stmt: Any = mysql_insert(self.table)
            return stmt.on_duplicate_key_update({n: stmt.inserted[n] for n in names})
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert
            stmt = pg_insert(self.table)
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert
            stmt = sqlite_insert(self.table)
        return stmt.on_conflict_do_update(index_elements=["id"],
                                          set_={n: stmt.excluded[n] for n in names})
