"""The alert rules of ``clustersync serve --alerts FILE`` (docs/api.md "Alerts"): a TOML file of
``[[rule]]`` tables, each a metric of ``/metrics`` or a check, a comparison, a threshold, how
long it must hold and labels; the shipped defaults (default_alerts.toml) when no file is given.

A file that does not fit is refused with one line naming the file, the rule and what is wrong
(AlertRulesError), before serve listens.
"""

from __future__ import annotations

import operator
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .alert_checks import CHECKS
from .metrics import sample_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne,
}
DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
RULE_FIELDS = {"name", "metric", "check", "op", "threshold", "for", "labels", "match",
               "increase_over", "summary"}
FILE_FIELDS = {"rule", "webhook"}
DEFAULTS = "default_alerts.toml"


class AlertRulesError(ValueError):
    """A rules file that cannot be used: the message is one line saying where and what."""


@dataclass(frozen=True)
class Rule:
    """One rule: ``metric`` (a sample name of /metrics) or ``check`` (alert_checks.CHECKS),
    compared with ``op`` against ``threshold``; it fires once that held for ``for_s`` seconds
    without a break, and resolves once it no longer holds. ``increase_over_s`` > 0 compares
    how much the value grew over that many seconds instead of the value; ``match`` keeps the
    samples whose labels have these values; ``labels`` go with every alert of the rule."""

    name: str
    op: str
    threshold: float
    metric: str | None = None
    check: str | None = None
    for_s: float = 0.0
    increase_over_s: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)
    match: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""

    def holds(self, value: float) -> bool:
        return OPS[self.op](value, self.threshold)

    @property
    def source(self) -> str:
        """What the rule reads: ``metric clustersync_node_up`` or ``check node_dead``."""
        return f"metric {self.metric}" if self.metric else f"check {self.check}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "check": self.check, "op": self.op,
                "threshold": self.threshold, "for_s": self.for_s,
                "increase_over_s": self.increase_over_s, "labels": dict(self.labels),
                "match": dict(self.match), "summary": self.summary}


@dataclass(frozen=True)
class RuleSet:
    """The rules serve evaluates, where they came from and the webhook the file names."""

    rules: tuple[Rule, ...]
    origin: str
    webhook: str | None = None


def load_rules(path: str | Path | None) -> RuleSet:
    """The rules of the TOML file ``path``, or the shipped defaults for None; AlertRulesError
    (one line) for a file that cannot be read or does not fit."""
    if path is None:
        text = resources.files(__package__).joinpath(DEFAULTS).read_text("utf-8")
        return parse_rules(text, "the default alert rules")
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AlertRulesError(f"{path}: cannot be read: {exc}") from None
    return parse_rules(text, str(path))


def parse_rules(text: str, origin: str) -> RuleSet:
    """The rules of TOML ``text`` (``origin`` names it in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AlertRulesError(f"{origin}: not TOML: {exc}") from None
    unknown = sorted(set(data) - FILE_FIELDS)
    if unknown:
        raise AlertRulesError(f"{origin}: unknown field(s) {', '.join(unknown)} (a rule is a "
                              f"[[rule]] table; the file may also set webhook)")
    webhook = data.get("webhook")
    if webhook is not None and not (isinstance(webhook, str)
                                    and webhook.startswith(("http://", "https://"))):
        raise AlertRulesError(f"{origin}: webhook must be an http:// or https:// URL")
    tables = data.get("rule", [])
    if not isinstance(tables, list):
        raise AlertRulesError(f"{origin}: rule must be an array of tables ([[rule]])")
    rules = tuple(_rule(table, f"{origin}: rule {n}", origin) for n, table in
                  enumerate(tables, 1))
    names = [rule.name for rule in rules]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise AlertRulesError(f"{origin}: more than one rule is named {', '.join(twice)}")
    return RuleSet(rules, origin, webhook)


def _rule(table: Any, where: str, origin: str) -> Rule:
    if not isinstance(table, dict):
        raise AlertRulesError(f"{where}: must be a table")
    name = table.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise AlertRulesError(f"{where}: needs a name (letters, digits and _ . : -)")
    where = f"{origin}: rule {name!r}"
    unknown = sorted(set(table) - RULE_FIELDS)
    if unknown:
        raise AlertRulesError(f"{where}: unknown field(s) {', '.join(unknown)}; a rule has "
                              f"{', '.join(sorted(RULE_FIELDS))}")
    metric, check = _source(table, where)
    op, threshold = _comparison(table, where)
    return Rule(name=name, op=op, threshold=threshold, metric=metric, check=check,
                for_s=duration_s(table.get("for", 0), f"{where}: for"),
                increase_over_s=duration_s(table.get("increase_over", 0),
                                           f"{where}: increase_over"),
                labels=_strings(table.get("labels", {}), f"{where}: labels"),
                match=_strings(table.get("match", {}), f"{where}: match"),
                summary=str(table.get("summary", "")))


def _source(table: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    """The rule's metric and check: one of them, known."""
    metric, check = table.get("metric"), table.get("check")
    if (metric is None) == (check is None):
        raise AlertRulesError(f"{where}: give either metric or check")
    if metric is not None and metric not in sample_names():
        raise AlertRulesError(f"{where}: no metric {metric!r} in /metrics (docs/api.md lists "
                              "them)")
    if check is not None and check not in CHECKS:
        raise AlertRulesError(f"{where}: no check {check!r}; the checks are "
                              f"{', '.join(sorted(CHECKS))}")
    return metric, check


def _comparison(table: dict[str, Any], where: str) -> tuple[str, float]:
    op = table.get("op")
    if op not in OPS:
        raise AlertRulesError(f"{where}: op must be one of {' '.join(OPS)}, not {op!r}")
    threshold = table.get("threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise AlertRulesError(f"{where}: threshold must be a number")
    return str(op), float(threshold)


def duration_s(value: Any, where: str) -> float:
    """Seconds of ``value``: a number of seconds, or a string like ``90s``, ``5m``, ``1h``,
    ``500ms``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    found = DURATION_RE.match(value) if isinstance(value, str) else None
    if found is None:
        raise AlertRulesError(f"{where} must be seconds or a duration like 90s, 5m, 1h, not "
                              f"{value!r}")
    return float(found.group(1)) * UNIT_S[found.group(2)]


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, (str, int, float))
                                              for v in value.values()):
        raise AlertRulesError(f"{where} must be a table of strings, like {{severity = "
                              "\"page\"}")
    return {str(key): str(item) for key, item in value.items()}
