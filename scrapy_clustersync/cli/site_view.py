"""``clustersync status JOB --sites``: each site's politeness budget for the cluster (the delay in
force, its backoff, requests under way, its next turn), the sites used last first, bounded."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..store.site_scripts import SiteStatus


def sites_dict(total: int, shown: list[SiteStatus]) -> dict[str, Any]:
    """What ``--sites --json`` prints: how many sites are in use and the ones shown."""
    return {"total": total, "shown": [
        {"site": s.site, "delay_s": round(s.delay_s, 3), "backoff_s": round(s.backoff_s, 3),
         "in_flight": s.in_flight, "next_turn_s": round(s.next_turn_s, 3),
         "blocked_s": round(s.blocked_s, 3), "idle_s": round(s.idle_s, 3)} for s in shown]}


def print_sites(sites: dict[str, Any], out: Console) -> None:
    """The sites as a table (``sites_dict``'s), with how many more there are."""
    shown = sites["shown"]
    if not shown:
        out.print("sites: none in use (no site with a delay, a cap or a slow-down)", markup=False)
        return
    table = Table(title=f"sites: {len(shown)} of {sites['total']}, used last first",
                  title_justify="left")
    for column in ("site", "delay", "backoff", "in flight", "next turn", "blocked", "idle"):
        table.add_column(column, justify="left" if column == "site" else "right")
    for each in shown:
        table.add_row(each["site"], f"{each['delay_s']:.3f}s", seconds_text(each["backoff_s"]),
                      str(each["in_flight"]), seconds_text(each["next_turn_s"], "now"),
                      seconds_text(each["blocked_s"]), f"{each['idle_s']:.1f}s")
    out.print(table)


def seconds_text(value: float, zero: str = "-") -> str:
    """Seconds as a table shows them: "1.25s", or ``zero`` for none."""
    return f"{value:.2f}s" if value > 0 else zero
