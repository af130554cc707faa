"""What `make compat` prints after the run, and whether the run passed.

The run passes when every required test passed and no test of ``DIFFERENCES`` passed (one that
passes is no longer a difference: the list must say so). Failures are printed in two groups:
the differences by design, with their reason, and every other failure (unexpected).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
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


def difference_outcomes(outcomes: Outcomes, differences: Iterable[str]) -> dict[str, str]:
    """test id -> outcome of each test of ``differences``; "not run" for one the run lacks."""
    return {test: outcomes.get(test, {}).get("outcome", "not run") for test in differences}


def problems(
    outcomes: Outcomes,
    required: Iterable[str],
    differences: Iterable[str],
    differences_were_run: bool = True,
) -> list[str]:
    """Why the run fails, one line each ([] if it passes): a required test that did not pass,
    a difference that passed or (in a run of the whole selection) was not run at all."""
    found = [f"required test {outcome}: {nodeid}"
             for nodeid, outcome in sorted(required_outcomes(outcomes, required).items())
             if outcome != "passed"]
    if differences_were_run:
        found += [f"listed in DIFFERENCES but {outcome}: {test}"
                  for test, outcome in sorted(difference_outcomes(outcomes, differences).items())
                  if outcome in ("passed", "not run")]
    return found


def print_summary(
    outcomes: Outcomes,
    required: Iterable[str],
    differences: Mapping[str, str],
    elapsed_s: float,
    differences_were_run: bool = True,
) -> list[str]:
    """Print the summary; returns ``problems`` (the run passed if there are none)."""
    print(f"\n== Scrapy's tests with scrapy_clustersync.Addon ({elapsed_s:.0f} s) ==")
    print("\nPer file (passed/failed/skipped/xfailed):")
    for path, counts in sorted(_per_file(outcomes).items()):
        print(f"  {path}: {counts['passed']}/{counts['failed']}/{counts['skipped']}"
              f"/{counts['xfailed']}")
    _print_required(outcomes, required)
    if differences_were_run:
        _print_differences(outcomes, differences)
    print("\nUnexpected failures (not in DIFFERENCES):")
    for nodeid, entry in sorted(outcomes.items()):
        if entry["outcome"] == "failed" and nodeid not in differences:
            print(f"  {nodeid}: {entry['reason']}")
    found = problems(outcomes, required, differences, differences_were_run)
    print("\nResult: " + ("OK" if not found else f"FAILED ({len(found)})"))
    for problem in found:
        print(f"  {problem}")
    return found


def _print_required(outcomes: Outcomes, required: Iterable[str]) -> None:
    required_now = required_outcomes(outcomes, required)
    passed = sum(outcome == "passed" for outcome in required_now.values())
    print(f"\nRequired: {passed} of {len(required_now)} pass")
    for nodeid, outcome in sorted(required_now.items()):
        if outcome != "passed":
            print(f"  {outcome.upper()} {nodeid}: {outcomes.get(nodeid, {}).get('reason', '')}")


def _print_differences(outcomes: Outcomes, differences: Mapping[str, str]) -> None:
    now = difference_outcomes(outcomes, differences)
    as_expected = sum(outcome not in ("passed", "not run") for outcome in now.values())
    print(f"\nDifferences by design (DIFFERENCES): {as_expected} of {len(now)} fail as expected")
    for test, outcome in sorted(now.items()):
        if outcome in ("passed", "not run"):
            print(f"  {outcome.upper()} {test}: no longer a difference? update DIFFERENCES")
        else:
            print(f"  {test}: {differences[test]}")


def _per_file(outcomes: Outcomes) -> dict[str, Counter[str]]:
    files: dict[str, Counter[str]] = {}
    for nodeid, entry in outcomes.items():
        files.setdefault(nodeid.split("::")[0], Counter())[entry["outcome"]] += 1
    return files
