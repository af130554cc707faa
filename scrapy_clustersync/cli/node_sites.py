"""The ``sites`` of node records as ``clustersync nodes`` shows them: a compact cell of the table
(the busiest sites, how many more) and, with ``--sites``, each node's sites in a table of its own.

A record's ``sites`` (plugin/site_summary.py) says what that node sees: the delay in force, the
backoff, a block (Retry-After) and its requests in flight, per site. Every value is Redis text:
it goes out as ``rich.text.Text`` or unmarked, never as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .site_view import seconds_text

#: the sites a table cell names at most
CELL_SITES = 2


def site_brief(site: dict[str, Any]) -> str:
    """One site in a few characters: "a.com 0.50s 2 out", "a.com blocked 30s", "a.com 4.00s
    backoff"."""
    name = str(site.get("site", "?"))
    blocked = _float(site.get("blocked_s"))
    if blocked > 0:
        return f"{name} blocked {blocked:.0f}s"
    text = f"{name} {_float(site.get('delay_s')):.2f}s"
    if _float(site.get("backoff_s")) > 0:
        text += " backoff"
    in_flight = site.get("in_flight") or 0
    return text + (f" {in_flight} out" if in_flight else "")


def sites_cell(node: dict[str, Any]) -> str:
    """The ``sites`` cell of a node: its busiest sites and "+N" for the rest ("" without)."""
    sites = node.get("sites")
    if not isinstance(sites, dict) or not sites.get("total"):
        return ""
    shown = [s for s in sites.get("shown") or [] if isinstance(s, dict)]
    text = ", ".join(site_brief(s) for s in shown[:CELL_SITES])
    rest = int(sites.get("total") or 0) - min(len(shown), CELL_SITES)
    return text + (f" +{rest}" if rest > 0 else "")


def print_node_sites(records: Sequence[dict[str, Any]], out: Console) -> None:
    """``nodes --sites``: for each node, the sites it paces (busiest first), bounded as its
    record is, with how many more it paces."""
    for node in records:
        sites = node.get("sites")
        name = str(node.get("id", "?"))
        if not isinstance(sites, dict) or not sites.get("shown"):
            out.print(Text(f"node {name}: no site paced (no delay, cap or slow-down seen)"))
            continue
        shown = [s for s in sites["shown"] if isinstance(s, dict)]
        table = Table(title=Text(f"node {name}: {len(shown)} of {sites.get('total', '?')} "
                                 "sites, busiest first"), title_justify="left")
        for column in ("site", "delay", "backoff", "blocked", "in flight", "idle"):
            table.add_column(column, justify="left" if column == "site" else "right")
        for site in shown:
            table.add_row(Text(str(site.get("site", "?"))), f"{_float(site.get('delay_s')):.3f}s",
                          seconds_text(_float(site.get("backoff_s"))),
                          seconds_text(_float(site.get("blocked_s"))),
                          Text(str(site.get("in_flight", 0))),
                          f"{_float(site.get('idle_s')):.1f}s")
        out.print(table)


def _float(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0
