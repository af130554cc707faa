"""`clustersync status --check` and `clustersync check` say *what* differs between live nodes (real
`scrapy crawl` nodes): a setting that changes the crawl is named with the nodes that have each
value; per-node outputs (`-o`, logs) are not a difference."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from test_check import HELD_SPIDER

from testkit.redis_server import RedisServer

from cli_runner import CliRun
from conftest import SiteFactory
from support import (
    Node,
    clustersync,
    node_env,
    open_barrier,
    project_with_spiders,
    start_node,
    wait_all,
    wait_until,
)

JOB = {"CLUSTERSYNC_JOB": "shop"}


def _held_nodes(redis_url: str, start_url: str, tmp_path: Path,
                nodes: Mapping[str, tuple[dict[str, str], tuple[str, ...]]]) -> list[Node]:
    """Nodes of job "shop" (name -> settings, command-line options) whose spider holds its first
    page until the barrier "checked" opens, so all stay live while the test looks."""
    project = project_with_spiders(tmp_path, "held", HELD_SPIDER)
    started = [start_node(name, redis_url, start_url, tmp_path, {**JOB, **settings},
                          project_dir=project, spider="held", env=node_env(tmp_path),
                          options=options)
               for name, (settings, options) in nodes.items()]

    def all_live() -> bool:
        listed = clustersync(redis_url, "nodes", "shop", "--json")
        return listed.returncode == 0 and sum(
            1 for n in json.loads(listed.stdout) if n["alive"] and n.get("digest")) == len(nodes)

    wait_until(all_live, timeout_s=90, what=f"{len(nodes)} live nodes")
    return started


def _checked(redis_url: str) -> tuple[CliRun, CliRun]:
    return (clustersync(redis_url, "status", "shop", "--check", "--json"),
            clustersync(redis_url, "check", "shop", "--json"))


def _ids_by_pid(status: CliRun) -> dict[int, str]:
    return {n["pid"]: n["id"] for n in json.loads(status.stdout)["nodes"]}


def test_nodes_differing_in_user_agent_are_reported_with_the_setting_and_the_nodes_named(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given three live nodes: a and b alike but for b's -o feed, c with another USER_AGENT
    web = site(20)
    nodes = _held_nodes(redis_server.url, web.start_url, tmp_path, {
        "a": ({"USER_AGENT": "crawler"}, ()),
        "b": ({"USER_AGENT": "crawler"}, ("-o", str(tmp_path / "items.jsonl"))),
        "c": ({"USER_AGENT": "other"}, ()),
    })
    try:
        # when the job's status is checked, and the job checked
        status, checked = _checked(redis_server.url)
    finally:
        open_barrier(tmp_path, "checked")
        wait_all(nodes, timeout_s=120)
    # then one line names USER_AGENT, a and b together, c apart, and why it matters
    ids = _ids_by_pid(status)
    a, b, c = (ids[node.process.pid] for node in nodes)
    lines = json.loads(status.stdout)["needs_attention"]
    assert status.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"USER_AGENT differs: nodes {', '.join(sorted([a, b]))} "), lines
    assert f"; node {c} " in lines[0] and lines[0].endswith(": it changes what the sites see")
    # and check finds the same, and nothing else
    found = json.loads(checked.stdout)["findings"]
    assert checked.returncode == 1
    assert [(f["kind"], f["subject"]) for f in found] == [("nodes_differ", "USER_AGENT")], found


def test_nodes_differing_only_in_their_feed_output_are_not_reported(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two live nodes alike but for where they write items (-o on one, -O on the other)
    # and where they log
    web = site(20)
    nodes = _held_nodes(redis_server.url, web.start_url, tmp_path, {
        "a": ({"USER_AGENT": "crawler", "LOG_FILE_APPEND": "False"},
              ("-o", str(tmp_path / "a.jsonl"))),
        "b": ({"USER_AGENT": "crawler"}, ("-O", str(tmp_path / "b.csv"))),
    })
    try:
        # when the job's status is checked, and the job checked
        status, checked = _checked(redis_server.url)
    finally:
        open_barrier(tmp_path, "checked")
        wait_all(nodes, timeout_s=120)
    # then nothing needs a person, and every invariant holds
    assert status.returncode == 0, status.stdout
    assert json.loads(status.stdout)["needs_attention"] == []
    assert checked.returncode == 0 and json.loads(checked.stdout)["findings"] == []
