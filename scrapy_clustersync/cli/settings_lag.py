"""Nodes that lag behind the job's shared settings: a live node whose record's
``settings_version`` (the version it applies) is not the job's (meta ``settings_version``).
A node applies a new version within a second; one that stays behind is cut off from Redis, or
runs a version of clustersync that does not apply shared settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..store.control_state import settings_version_of

#: the field ``status`` and ``nodes`` add to a lagging node's record
LAG_FIELD = "settings_lag"


def job_settings_version(meta: Mapping[str, Any]) -> int:
    """The job's shared-settings version (0: none ever set)."""
    return settings_version_of(meta.get("settings_version"))


def applied_version(node: Mapping[str, Any]) -> int:
    """The version a node record says its node applies (0: none)."""
    try:
        return int(node.get("settings_version") or 0)
    except (TypeError, ValueError):
        return 0


def mark_lagging(nodes: Iterable[dict[str, Any]], version: int) -> None:
    """Add LAG_FIELD (versions behind) to each live node that does not apply ``version``."""
    for node in nodes:
        node.pop(LAG_FIELD, None)
        if node.get("alive") and version and applied_version(node) != version:
            node[LAG_FIELD] = version - applied_version(node)


def lagging_lines(nodes: Iterable[Mapping[str, Any]], version: int) -> list[str]:
    """What ``status --check`` says of each live node that does not apply ``version``."""
    return [f"node {node['id']} applies shared settings version {applied_version(node)}, the "
            f"job's is {version} (cut off from Redis, or a clustersync that predates shared "
            "settings?)" for node in nodes
            if node.get("alive") and version and applied_version(node) != version]
