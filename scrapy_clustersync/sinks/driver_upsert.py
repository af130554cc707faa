"""MySQL/MariaDB: a batch upserted by the DB-API driver's own ``executemany`` of the
``INSERT ... ON DUPLICATE KEY UPDATE`` SQLAlchemy compiled for the table, in the batch's
transaction.

The statement is SQLAlchemy's, compiled once per table; only the rows go to the driver
directly, as the driver takes them (a map per row, or a tuple in the statement's order), their
``item`` made JSON here. PyMySQL and mysqlclient send an INSERT's ``executemany`` as one
multi-row statement either way; what this skips is SQLAlchemy's processing of every row's
parameters, about a sixth of the sink's CPU per row into MariaDB (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect

from .sql_columns import json_text


class DriverUpsert:
    """``statement`` (an upsert of every column of a table) compiled for ``dialect``; ``run``
    upserts rows (column -> value, as the sink builds them, ``item`` the result's map)."""

    def __init__(self, statement: Any, dialect: Dialect, nul_free: bool = False) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        #: the columns in the order of a positional statement's marks (None: named marks)
        self.order: list[str] | None = compiled.positiontup
        #: column -> the name of its mark where SQLAlchemy had to change it (named marks)
        self.marks: dict[str, str] = dict(compiled.escaped_bind_names)
        self.nul_free = nul_free

    def run(self, connection: Connection, rows: list[dict[str, Any]]) -> None:
        """Upsert ``rows`` within ``connection``'s transaction."""
        cursor: Any = connection.connection.cursor()
        try:
            cursor.executemany(self.sql, [self._params(row) for row in rows])
        finally:
            cursor.close()

    def _params(self, row: dict[str, Any]) -> Any:
        row = {**row, "item": json_text(row["item"], self.nul_free)}
        if self.order is not None:
            return tuple(row[name] for name in self.order)
        if self.marks:
            return {self.marks.get(name, name): value for name, value in row.items()}
        return row
