"""The "readers" part of ``clustersync status``: each reader group of the job's results (a
``consume``, a ``sink``, a ``ResultReader``) with how far behind it is, the groups furthest
behind first, at most READERS_SHOWN of them."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..store.results_store import GroupState

#: reader groups listed at most (the rest are counted)
READERS_SHOWN = 20


def readers_dict(groups: list[GroupState], held: int) -> dict[str, Any]:
    """What ``status --json`` prints under ``readers``: ``held`` (entries the results stream
    holds now), ``total`` groups, and the ``groups`` shown, furthest behind first: each one's
    ``undelivered`` (not delivered to it yet), ``pending`` (delivered, not acknowledged) and
    ``lag`` (both: what it has yet to acknowledge)."""
    ordered = sorted(groups, key=lambda g: (-g.behind, g.name))[:READERS_SHOWN]
    return {"held": held, "total": len(groups), "groups": [
        {"group": g.name, "consumers": g.consumers, "pending": g.pending,
         "undelivered": g.lag or 0, "lag": g.behind, "last_delivered_id": g.last_delivered}
        for g in ordered]}


def print_readers(readers: dict[str, Any], out: Console) -> None:
    """The reader groups as a table (nothing when the job has none)."""
    shown = readers["groups"]
    if not shown:
        return
    title = f"readers: {readers['total']} group(s), {readers['held']:,} results held"
    table = Table(title=title, title_justify="left")
    for column in ("group", "consumers", "lag", "pending", "undelivered", "last delivered"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for each in shown:
        table.add_row(Text(each["group"]), str(each["consumers"]), f"{each['lag']:,}",
                      f"{each['pending']:,}", f"{each['undelivered']:,}",
                      each["last_delivered_id"])
    out.print(table)
    if readers["total"] > len(shown):
        out.print(f"  ... and {readers['total'] - len(shown)} more group(s)", markup=False)
