"""docs/architecture.md lists every key of the cluster (not of a job) that store/keys.py names,
and no other."""

from __future__ import annotations

import re
from pathlib import Path

from scrapy_clustersync.store.keys import CLUSTER_KEY_FUNCTIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def documented_cluster_keys() -> list[str]:
    section = DOC.read_text().split("## Keys of the cluster", 1)[1].split("\n## ", 1)[0]
    return [re.match(r"\| `([^`]+)`", row).group(1)  # type: ignore[union-attr]
            for row in section.splitlines() if row.startswith("| `")]


def test_the_cluster_keys_table_lists_every_cluster_key_once() -> None:
    documented = documented_cluster_keys()
    assert len(documented) == len(set(documented))
    assert set(documented) == {key() for key in CLUSTER_KEY_FUNCTIONS}
