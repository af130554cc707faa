"""What `make compat` prints after the run: the required tests, totals per file, failures."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

Outcomes = dict[str, dict[str, str]]


def load_outcomes(report: Path) -> Outcomes:
    """nodeid -> {"outcome", "reason"} as the plugin wrote it ({} if pytest wrote nothing)."""
    if not report.exists():
        return {}
    loaded: Outcomes = json.loads(report.read_text())
    return loaded


def is_selected_by(nodeid: str, selector: str) -> bool:
    """True if ``selector`` (a file, a class or a test, as given to pytest) names ``nodeid``."""
    return nodeid == selector or nodeid.startswith((f"{selector}::", f"{selector}["))


def required_outcomes(outcomes: Outcomes, required: Iterable[str]) -> dict[str, str]:
    """nodeid -> outcome of each test a ``required`` selector names; "not run" for a selector
    that named nothing (a renamed test must not pass silently)."""
    found: dict[str, str] = {}
    for selector in required:
        named = {n: o["outcome"] for n, o in outcomes.items() if is_selected_by(n, selector)}
        found.update(named or {selector: "not run"})
    return found


def print_summary(report: Path, required: Iterable[str], elapsed_s: float) -> None:
    outcomes = load_outcomes(report)
    print(f"\n== Scrapy's tests with scrapy_clustersync.Addon ({elapsed_s:.0f} s) ==")
    print("\nPer file (passed/failed/skipped/xfailed):")
    for path, counts in sorted(_per_file(outcomes).items()):
        print(f"  {path}: {counts['passed']}/{counts['failed']}/{counts['skipped']}"
              f"/{counts['xfailed']}")
    required_now = required_outcomes(outcomes, required)
    passed = sum(outcome == "passed" for outcome in required_now.values())
    print(f"\nRequired by issue 8: {passed} of {len(required_now)} pass")
    for nodeid, outcome in sorted(required_now.items()):
        if outcome != "passed":
            print(f"  {outcome.upper()} {nodeid}: {outcomes.get(nodeid, {}).get('reason', '')}")
    print("\nEvery failure:")
    for nodeid, entry in sorted(outcomes.items()):
        if entry["outcome"] == "failed":
            print(f"  {nodeid}: {entry['reason']}")


def _per_file(outcomes: Outcomes) -> dict[str, Counter[str]]:
    files: dict[str, Counter[str]] = {}
    for nodeid, entry in outcomes.items():
        files.setdefault(nodeid.split("::")[0], Counter())[entry["outcome"]] += 1
    return files
