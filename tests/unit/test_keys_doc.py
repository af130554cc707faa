"""docs/architecture.md lists every key of a job that store/keys.py can name, and no other."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from scrapy_clustersync.store.keys import JobKeys

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
JOB = JobKeys("JOB")
PREFIX = JOB.meta.removesuffix("meta")
#: JobKeys members that name no key: the pub/sub channel, the list of the others, the
#: prefixes that scripts name keys from, and the job's other partitions' keys
NOT_KEYS = {"control_channel", "shared_keys", "frontier", "site_prefix", "of_partition",
            "partitions"}


def documented_keys() -> list[str]:
    """The first column of the table under "## Keys of a job", without its backticks."""
    section = DOC.read_text().split("## Keys of a job", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]


def buildable_keys() -> set[str]:
    """Every key name JobKeys builds: its properties, and its methods with each parameter
    shown as ``<parameter>`` (as the table writes ``bloom:<layer>:<chunk>``)."""
    names = set()
    for name, member in inspect.getmembers(JobKeys):
        if name.startswith("_") or name in NOT_KEYS:
            continue
        key: Any
        if isinstance(member, property):
            key = getattr(JOB, name)
        elif inspect.isfunction(member):
            params = list(inspect.signature(member).parameters)[1:]
            key = getattr(JOB, name)(*(f"<{param}>" for param in params))
        else:
            continue
        assert isinstance(key, str) and key.startswith(PREFIX), name
        names.add(key.removeprefix(PREFIX))
    return names


def test_the_keys_table_lists_every_key_the_keys_module_builds_once() -> None:
    documented = documented_keys()
    assert len(documented) == len(set(documented))
    assert set(documented) == buildable_keys()


def test_every_key_purge_deletes_is_in_the_table() -> None:
    shared = {key.removeprefix(PREFIX) for key in JOB.shared_keys()}
    assert shared <= set(documented_keys())
