"""The least-privilege users of docs/operations.md, made with exactly the lines written there
(their password placeholder replaced) on the servers a test started."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from testkit.redis_server import RedisServer

from support import ROOT

OPERATIONS = ROOT / "docs" / "operations.md"
PASSWORDS = {"crawler": "crawl-pw", "operator": "oper-pw"}


def documented_lines(user: str, block: str | None = None) -> list[str]:
    """The ``ACL SETUSER USER`` lines of the fenced block after ``<!-- acl:BLOCK -->``
    (BLOCK is USER unless given)."""
    text = OPERATIONS.read_text()
    name = block or user
    match = re.search(rf"<!-- acl:{re.escape(name)} -->\n```\n(.*?)```", text, re.S)
    assert match, f"no ACL block {name} in {OPERATIONS}"
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    assert lines and all(line.startswith(f"ACL SETUSER {user} ") for line in lines), lines
    return lines


def run_lines(servers: Iterable[RedisServer], user: str, lines: list[str]) -> None:
    """Run ``lines`` on each of ``servers`` as their default (admin) user."""
    for server in servers:
        admin = server.client()
        for line in lines:
            line = line.replace(f">{user.upper()}_PASSWORD", f">{PASSWORDS[user]}")
            admin.execute_command(*shlex.split(line))  # type: ignore[no-untyped-call]


def refusals(servers: Iterable[RedisServer]) -> list[str]:
    """What the servers' ACL logs hold: each refused command or key, with its user."""
    return [f"{server.port} {entry['username']}: {entry['reason']} {entry['object']}"
            for server in servers for entry in server.client().acl_log()]
