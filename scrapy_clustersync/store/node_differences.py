"""What differs between the live nodes of a job: which settings, which files, which versions, and
on which nodes, from the digests in their records (node/project_digest.py).

Used by ``clustersync check`` (findings) and ``status --check`` (lines). A record holds a digest
per setting that is not Scrapy's default and per project file; nodes are grouped by the digest
they have, the most common first, so that the odd node stands out. Records of an older version,
without those digests, are compared by their one ``digest``, node by node.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

#: most settings (and files) named one by one; more make one line with their count
MAX_NAMED = 10
#: why a differing setting matters, for the settings that say more than "the nodes differ"
SETTING_NOTES = {
    "USER_AGENT": "it changes what the sites see",
    "DEFAULT_REQUEST_HEADERS": "it changes what the sites see",
    "ROBOTSTXT_OBEY": "it changes which pages may be fetched",
    "CLUSTERSYNC_DEDUP": "the job's dedup is set by its first node: this setting does nothing "
                         "on the others",
}
DEFAULT_SETTING_NOTE = "the nodes crawl differently"
FILE_NOTE = "the nodes run different code"
#: what a record without a setting's digest means
MISSING = {"setting": "Scrapy's default", "file": "no such file"}


@dataclass(frozen=True)
class Difference:
    """One thing that is not the same on every live node: ``kind`` is "setting", "file",
    "versions" or "digest"; ``name`` the setting or file ("" for the last two); ``groups`` the
    nodes by what they have, most common first; ``note`` why it matters."""

    kind: str
    name: str
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    note: str

    @property
    def subject(self) -> str:
        """What differs: ``USER_AGENT``, ``file example/spiders/site.py``, ``versions``."""
        if self.kind == "setting":
            return self.name
        return f"file {self.name}" if self.kind == "file" else self.kind

    @property
    def detail(self) -> str:
        """Which node has what: ``node a 1f3a9c2e, node b 77ab01de: <note>``."""
        parts = []
        for value, nodes in self.groups:
            label = "node" if len(nodes) == 1 else "nodes"
            parts.append(f"{label} {', '.join(nodes)} {value}")
        return f"{'; '.join(parts)}: {self.note}" if self.note else "; ".join(parts)

    def line(self) -> str:
        """The one line ``status --check`` prints: ``USER_AGENT differs: node a ..., ...``."""
        if not self.groups:  # the count of those not named one by one
            return f"{self.name} differ too: {self.note}"
        return f"{self.subject} differs: {self.detail}"


def node_differences(live: Mapping[str, Mapping[str, Any]],
                     shared: Collection[str] = ()) -> list[Difference]:
    """What differs between the ``live`` node records (node id -> record). ``shared``: the
    settings the job shares (its shared settings' keys): every node applies the job's value, so
    a node's own value of one (or its ``-s`` override) is no difference."""
    detailed = {node: record for node, record in live.items()
                if isinstance(record.get("setting_digests"), dict)}
    found: list[Difference] = []
    if len(detailed) >= 2:
        settings = _by_item(detailed, "setting", "setting_digests")
        found += [d for d in settings if d.name not in shared]
        found += _by_item(detailed, "file", "file_digests")
        if len(found) < len(settings) and len(detailed) == len(live):
            return found + _by_field(live, "versions", "the nodes run other versions")
    if not found:
        # older records, or digests that differ beyond what the records detail
        found += _by_field(live, "digest", "the code or settings differ")
    found += _by_field(live, "versions", "the nodes run other versions")
    return found


def _by_item(records: Mapping[str, Mapping[str, Any]], kind: str,
             field: str) -> list[Difference]:
    names = sorted({name for record in records.values()
                    for name in (record.get(field) or {})})
    found = []
    for name in names:
        values = {node: str((record.get(field) or {}).get(name, MISSING[kind]))
                  for node, record in records.items()}
        if len(set(values.values())) > 1:
            note = FILE_NOTE if kind == "file" else SETTING_NOTES.get(name, DEFAULT_SETTING_NOTE)
            found.append(Difference(kind, name, _groups(values), note))
    if len(found) > MAX_NAMED:
        more = len(found) - MAX_NAMED + 1
        plural = "settings" if kind == "setting" else "files"
        found = found[:MAX_NAMED - 1] + [Difference(
            kind, f"and {more} more {plural}", (), "`clustersync nodes --json` has every "
            f"node's {field}")]
    return found


def _by_field(records: Mapping[str, Mapping[str, Any]], field: str,
              note: str) -> list[Difference]:
    values = {node: repr(record.get(field)) for node, record in records.items()
              if record.get(field) is not None}
    if len(set(values.values())) < 2:
        return []
    return [Difference(field, "", _groups(values), note)]


def _groups(values: Mapping[str, str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Nodes by value, the most common value first (then by value, for a stable order)."""
    by_value: dict[str, list[str]] = {}
    for node in sorted(values):
        by_value.setdefault(values[node], []).append(node)
    ordered = sorted(by_value.items(), key=lambda pair: (-len(pair[1]), pair[0]))
    return tuple((value, tuple(nodes)) for value, nodes in ordered)
