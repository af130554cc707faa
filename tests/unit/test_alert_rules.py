"""The alert rules file: the shipped defaults load, every field is checked, and a file that does
not fit is refused with one line naming the file, the rule and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapy_clustersync.api.alert_rules import AlertRulesError, load_rules, parse_rules

GOOD = """
webhook = "http://127.0.0.1:9/hook"

[[rule]]
name = "dead"
check = "node_dead"
op = ">="
threshold = 1
for = "90s"
labels = { severity = "page" }

[[rule]]
name = "letters"
metric = "clustersync_job_dead_letters"
increase_over = "5m"
op = ">"
threshold = 0
match = { job = "shop" }
"""


def test_the_shipped_defaults_load_with_a_rule_for_each_thing_watched() -> None:
    rules = load_rules(None)
    assert {r.name for r in rules.rules} == {
        "node_dead", "settings_differ", "job_stalled", "dead_letters_growing",
        "redis_memory_high", "consistency"}
    assert rules.webhook is None


def test_a_file_gives_its_rules_durations_labels_and_webhook(tmp_path: Path) -> None:
    path = tmp_path / "alerts.toml"
    path.write_text(GOOD)
    rules = load_rules(path)
    dead, letters = rules.rules
    assert (dead.check, dead.op, dead.threshold, dead.for_s) == ("node_dead", ">=", 1.0, 90.0)
    assert dead.labels == {"severity": "page"} and dead.holds(1) and not dead.holds(0)
    assert (letters.metric, letters.increase_over_s, letters.match) == (
        "clustersync_job_dead_letters", 300.0, {"job": "shop"})
    assert rules.webhook == "http://127.0.0.1:9/hook"


@pytest.mark.parametrize(("text", "says"), [
    ("[[rule]\nname=", "not TOML"),
    ('[[rule]]\nname = "a"\ncheck = "node_dead"\nop = "=<"\nthreshold = 1',
     "rule 'a': op must be one of"),
    ('[[rule]]\nname = "a"\nmetric = "clustersync_nope"\nop = ">"\nthreshold = 1',
     "rule 'a': no metric 'clustersync_nope' in /metrics"),
    ('[[rule]]\nname = "a"\ncheck = "nope"\nop = ">"\nthreshold = 1', "no check 'nope'"),
    ('[[rule]]\nname = "a"\nop = ">"\nthreshold = 1', "give either metric or check"),
    ('[[rule]]\nname = "a"\ncheck = "node_dead"\nop = ">"\nthreshold = "x"',
     "threshold must be a number"),
    ('[[rule]]\nname = "a"\ncheck = "node_dead"\nop = ">"\nthreshold = 1\nfor = "soon"',
     "for must be seconds or a duration"),
    ('[[rule]]\nname = "a"\ncheck = "node_dead"\nop = ">"\nthreshold = 1\nlevel = 2',
     "unknown field(s) level"),
    ('[[rule]]\ncheck = "node_dead"\nop = ">"\nthreshold = 1', "rule 1: needs a name"),
    ('[[rule]]\nname = "a"\ncheck = "node_dead"\nop = ">"\nthreshold = 1\n'
     '[[rule]]\nname = "a"\ncheck = "node_dead"\nop = ">"\nthreshold = 2',
     "more than one rule is named a"),
    ('webhook = "ftp://x"', "webhook must be an http"),
])
def test_a_rules_file_that_does_not_fit_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(AlertRulesError) as refused:
        parse_rules(text, "alerts.toml")
    message = str(refused.value)
    assert message.startswith("alerts.toml: ") and says in message and "\n" not in message


def test_a_file_that_cannot_be_read_says_so(tmp_path: Path) -> None:
    with pytest.raises(AlertRulesError, match="cannot be read"):
        load_rules(tmp_path / "none.toml")
