"""The nodes of a job as ``status``, ``nodes`` and ``top`` list them: the nodes of the run under
way, the others (earlier runs, dead for long) summed up in one line unless ``--all``, and a
table that fits the width it is given.

Every value from a node record is Redis text: it goes into the table as ``rich.text.Text``,
never as markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ..store import JobStatus
from ..store.job_runs import RunStart
from .node_sites import sites_cell
from .settings_lag import LAG_FIELD, job_settings_version, mark_lagging

#: a node dead (or silent) longer than this is summed up with the earlier runs' nodes
LONG_DEAD_S = 600.0
#: what a column costs beyond its text, but the first: the gap to the one before it (a table of
#: box.SIMPLE_HEAD without edges: padding, a blank where a border would be, padding)
COLUMN_GAP = 3


@dataclass
class NodeGroups:
    """A job's node records split in what is listed and what is summed up."""

    shown: list[dict[str, Any]] = field(default_factory=list)
    earlier: list[dict[str, Any]] = field(default_factory=list)
    long_dead: list[dict[str, Any]] = field(default_factory=list)
    #: nodes whose records were pruned after CLUSTERSYNC_NODE_RETENTION
    pruned: int = 0

    def listed(self, every: bool) -> list[dict[str, Any]]:
        """The records to list: the shown ones, or with ``every`` all of them, by id."""
        if not every:
            return self.shown
        return sorted(self.shown + self.earlier + self.long_dead, key=lambda n: str(n["id"]))


    def tagged(self) -> list[dict[str, Any]]:
        """Every record, by id, with its ``group``: "this run", "earlier run" or "long dead"."""
        tags = [(self.shown, "this run"), (self.earlier, "earlier run"),
                (self.long_dead, "long dead")]
        every = [{**node, "group": tag} for nodes, tag in tags for node in nodes]
        return sorted(every, key=lambda n: str(n["id"]))


def group_nodes(report: JobStatus) -> NodeGroups:
    """The nodes of the run under way, and those of earlier runs (not alive, last heard of
    before this run started) and those dead or silent for more than LONG_DEAD_S."""
    run = RunStart.from_meta(report.meta)
    groups = NodeGroups(pruned=report.pruned.get("nodes", 0))
    mark_lagging(report.nodes, job_settings_version(report.meta))
    for node in report.nodes:
        if not node.get("alive") and run.started_ms and _last_heard_ms(node) < run.started_ms:
            groups.earlier.append(node)
        elif node.get("state") in ("dead", "silent") and (node.get("silent_s") or 0) > LONG_DEAD_S:
            groups.long_dead.append(node)
        else:
            groups.shown.append(node)
    return groups


def _last_heard_ms(node: dict[str, Any]) -> float:
    """The node's last heartbeat, server ms (its own clock for a record from before those were
    kept)."""
    if node.get("last_beat_ms") is not None:
        return float(node["last_beat_ms"])
    return float(node.get("updated") or 0) * 1000


def hidden_line(groups: NodeGroups, every: bool) -> str | None:
    """The one line that sums up the nodes not listed, e.g. "+4 nodes of earlier runs, 2 dead >
    10 min: --all to list"; None when every node is listed and none was pruned."""
    parts = []
    if groups.earlier and not every:
        parts.append(f"+{len(groups.earlier)} node(s) of earlier runs")
    if groups.long_dead and not every:
        parts.append(f"{len(groups.long_dead)} dead > {LONG_DEAD_S / 60:g} min")
    line = ", ".join(parts) + (": --all to list" if parts else "")
    if groups.pruned:
        line += ("; " if line else "") + (f"{groups.pruned} older node(s) pruned "
                                          "(CLUSTERSYNC_NODE_RETENTION)")
    return line or None


def state_text(node: dict[str, Any]) -> str:
    """A node's state as listed: "silent for 21s" for a node gone without a word that no live
    node has declared dead yet, else its record's state ("dead" once declared), with
    ", settings behind" for a node that does not apply the job's shared settings yet."""
    state = str(node.get("state", "?"))
    if state == "silent":
        return f"silent for {float(node.get('silent_s') or 0):.0f}s"
    if node.get(LAG_FIELD):  # settings_lag.py
        return f"{state}, settings behind"
    return state


def held(node: dict[str, Any]) -> str:
    """The requests the node holds leased (in flight or prefetched)."""
    return str(node.get("leased", node.get("inflight", 0)))


def seen_ago(node: dict[str, Any]) -> str:
    silent = node.get("silent_s")
    return "" if silent is None else f"{float(silent):.0f}s"


def versions_text(node: dict[str, Any]) -> str:
    versions = node.get("versions") or {}
    if not isinstance(versions, dict):
        return str(versions)
    return " ".join(f"{k} {v}" for k, v in sorted(versions.items()))


@dataclass(frozen=True)
class Column:
    """One column of a node table: its header, its rank (0 is dropped last when the table is
    narrow) and how a record's cell reads."""

    header: str
    rank: int
    cell: Callable[[dict[str, Any]], str]


def _field(name: str, default: Any = "") -> Callable[[dict[str, Any]], str]:
    return lambda node: str(node.get(name, default))


def _number(name: str, scale: float = 1.0) -> Callable[[dict[str, Any]], str]:
    def cell(node: dict[str, Any]) -> str:
        try:
            return f"{float(node.get(name) or 0) / scale:.0f}"
        except (TypeError, ValueError):
            return str(node.get(name))
    return cell


def _load(node: dict[str, Any]) -> str:
    load = node.get("load_avg") or []
    return " ".join(f"{float(x):.1f}" for x in load[:1]) if isinstance(load, list) else ""


def _rate(node: dict[str, Any]) -> str:
    """Pages/min over the node's last minute; "-" for a node not alive (its last figure)."""
    return _number("pages_per_min")(node) if node.get("alive") else "-"


#: every column of ``nodes``, in the order shown; ``status`` and ``top`` list fewer
NODE_COLUMNS = (
    Column("node", 0, lambda node: str(node["id"])),
    Column("state", 1, state_text),
    Column("pages/min", 2, _rate),
    Column("pages", 3, _field("pages", 0)),
    Column("held", 4, held),
    Column("items", 5, _field("items", 0)),
    Column("errors", 6, _field("errors")),
    Column("buffered", 7, _field("buffered", 0)),
    Column("inflight", 15, _field("inflight", 0)),
    Column("prefetched", 16, _field("prefetched")),
    Column("cpu %", 8, _number("cpu_percent")),
    Column("rss MiB", 9, _number("rss_bytes", 2**20)),
    Column("load", 13, _load),
    Column("concurrency", 14, _field("concurrency")),
    Column("host", 10, _field("host")),
    Column("pid", 11, _field("pid")),
    Column("alive", 12, lambda node: "yes" if node.get("alive") else "no"),
    Column("seen ago", 12, seen_ago),
    Column("digest", 17, lambda node: str(node.get("digest", ""))[:12]),
    Column("versions", 18, versions_text),
    Column("sites", 19, sites_cell),
)
STATUS_COLUMNS = ("node", "state", "pages/min", "pages", "held", "items", "buffered",
                  "rss MiB", "seen ago")
#: a versions column that tells something (the nodes run different versions) ranks here
VERSIONS_DIFFER_RANK = 5


def node_table(records: Sequence[dict[str, Any]], width: int,
               names: Sequence[str] | None = None) -> Table:
    """The table of ``records`` in ``width`` columns: the columns named (default: all, in
    their order) that fit, by rank; the node id always. Every cell is plain text."""
    columns = list(NODE_COLUMNS) if names is None else [
        c for name in names for c in NODE_COLUMNS if c.header == name]
    if len({versions_text(n) for n in records}) > 1:
        columns = [Column(c.header, VERSIONS_DIFFER_RANK, c.cell) if c.header == "versions"
                   else c for c in columns]
    cells = {c.header: [c.cell(node) for node in records] for c in columns}
    chosen = fit(columns, cells, width)
    # the headers are ours, not Redis text; no edges and no borders: the width is the text's
    table = Table(*(c.header for c in chosen), box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False)
    for i in range(len(records)):
        table.add_row(*(Text(cells[c.header][i]) for c in chosen))
    return table


def fit(columns: Sequence[Column], cells: dict[str, list[str]], width: int) -> list[Column]:
    """The columns that fit in ``width``, best rank first, in their order: each costs its
    widest cell or header, and COLUMN_GAP but the first; the first ranked is kept whatever its
    width."""
    used, chosen = 0, set[str]()
    for column in sorted(columns, key=lambda c: c.rank):
        cost = max([len(column.header), *map(len, cells[column.header])])
        cost += COLUMN_GAP if chosen else 0
        if used + cost <= width or not chosen:
            chosen.add(column.header)
            used += cost
    return [c for c in columns if c.header in chosen]
