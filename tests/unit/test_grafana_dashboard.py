"""docs/grafana/clustersync.json, the Grafana dashboard shipped with the docs: every query in it
names metrics /metrics answers with, and only those."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scrapy_clustersync.api.metrics import sample_names

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "clustersync.json"
METRIC_RE = re.compile(r"\bclustersync_[a-z0-9_]+")


def expressions(node: Any) -> Iterator[str]:
    """Every PromQL expression of the dashboard: panel targets' ``expr`` and variables'
    queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            query = key == "query" and "(" in str(value)
            if isinstance(value, str) and (key in ("expr", "definition") or query):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def test_every_expression_of_the_grafana_dashboard_names_existing_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    found = list(expressions(dashboard))
    assert len(found) >= 20
    known = sample_names()
    for expr in found:
        named = METRIC_RE.findall(expr)
        assert named, f"{expr!r} names no clustersync metric"
        assert set(named) <= known, f"{expr!r}: {sorted(set(named) - known)} are not metrics"


def test_every_panel_has_a_query_and_a_place_of_its_own() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert all(panel["targets"] for panel in panels)
    assert len({panel["id"] for panel in panels}) == len(panels)
