"""The ACL users of docs/operations.md allow every command the Lua scripts can run (Redis checks
each command a script runs against the user): a command added to a script must be added there.
(tests/test_acl.py runs a crawl and the CLI as these users.)"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
LUA = resources.files("scrapy_clustersync.store").joinpath("lua")
#: the scripts only the `clustersync` command (or a reader) runs, never a node
NOT_NODES = {"check", "control", "regions", "requeue", "results_ack", "settings"}
#: words in quotes in the scripts that are arguments, not commands
ARGUMENTS = {"LIMIT", "WITHSCORES", "COUNT", "GROUPS", "MINID", "NX", "XX", "GT", "LT"}


def allowed(user: str) -> set[str]:
    match = re.search(rf"<!-- acl:{user} -->\n```\n(.*?)```", OPERATIONS.read_text(), re.S)
    assert match
    rules = [rule[1:].upper() for rule in match.group(1).split() if rule.startswith("+")]
    return set(rules) | {rule.split("|")[0] for rule in rules}  # XINFO|GROUPS: XINFO's


def commands_of(script: str) -> set[str]:
    text = LUA.joinpath(f"{script}.lua").read_text()
    named = set(re.findall(r"redis\.p?call\('([A-Za-z]+)'", text))
    named |= set(re.findall(r"'([A-Z]{3,})'", text))  # as values: command = 'LPUSH'
    return {name.upper() for name in named} - ARGUMENTS


SCRIPTS = sorted(each.name[:-4] for each in LUA.iterdir() if each.name.endswith(".lua"))


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in NOT_NODES])
def test_the_crawler_user_may_run_every_command_of_a_node_script(script: str) -> None:
    assert commands_of(script) - allowed("crawler") == set()


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_operator_user_may_run_every_command_of_every_script(script: str) -> None:
    assert commands_of(script) - allowed("operator") == set()


def test_the_crawler_user_may_not_purge_or_list_jobs() -> None:
    # purge lists the job's keys (SCAN) and reads its lists' lengths (LLEN) before it deletes
    assert {"SCAN", "LLEN", "FLUSHALL", "FLUSHDB", "KEYS", "CONFIG"} & allowed("crawler") == set()
