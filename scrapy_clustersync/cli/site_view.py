"""``clustersync status JOB --sites``: each site's politeness budget for the cluster (the delay in
force, its backoff, requests under way, its next turn), the sites used last first, bounded."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..store.frontier_status import FrontierStatus
from ..store.site_scripts import SiteStatus


def sites_dict(total: int, shown: list[SiteStatus], queue: FrontierStatus) -> dict[str, Any]:
    """What ``--sites --json`` prints: how many sites are in use and the ones shown, and the
    queue: requests and bytes queued, over how many sites, the deepest sites first."""
    return {"total": total, "shown": [
        {"site": s.site, "delay_s": round(s.delay_s, 3), "backoff_s": round(s.backoff_s, 3),
         "in_flight": s.in_flight, "next_turn_s": round(s.next_turn_s, 3),
         "blocked_s": round(s.blocked_s, 3), "idle_s": round(s.idle_s, 3)} for s in shown],
        "queue": {"queued": queue.queued, "bytes": queue.bytes, "sites": queue.sites,
                  "ready": queue.ready, "resting": queue.resting,
                  "deepest": [{"site": d.site, "queued": d.queued, "wait_s": round(d.wait_s, 3)}
                              for d in queue.deepest]}}


def print_sites(sites: dict[str, Any], out: Console) -> None:
    """The sites as tables (``sites_dict``'s): the queue's deepest, then the budgets."""
    print_queue(sites["queue"], out)
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


def print_queue(queue: dict[str, Any], out: Console) -> None:
    """The frontier's deepest sites, each ready or how long it waits for its next start."""
    size = queue["bytes"] / max(1, queue["queued"])
    out.print(f"queue: {queue['queued']:,} requests over {queue['sites']:,} sites, "
              f"{queue['bytes']:,} bytes of requests ({size:.0f} per request); site lists "
              f"ready {queue['ready']:,}, resting until their pace lets one start "
              f"{queue['resting']:,}", markup=False)
    if not queue["deepest"]:
        return
    table = Table(title=f"deepest sites: {len(queue['deepest'])} of {queue['sites']:,}",
                  title_justify="left")
    for column in ("site", "queued", "next start"):
        table.add_column(column, justify="left" if column == "site" else "right")
    for each in queue["deepest"]:
        table.add_row(each["site"], f"{each['queued']:,}",
                      seconds_text(each["wait_s"], "ready"))
    out.print(table)


def seconds_text(value: float, zero: str = "-") -> str:
    """Seconds as a table shows them: "1.25s", or ``zero`` for none."""
    return f"{value:.2f}s" if value > 0 else zero
