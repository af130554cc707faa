"""The alerts of `clustersync serve` beside a real crawl: a node frozen past the dead threshold
fires the dead-node rule to a webhook exactly once (two serve processes evaluate it), and it
resolves exactly once when the node is back; the webhook's refusals are retried; a rules file
that does not fit stops serve with one line."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from alert_receiver import AlertReceiver
from api_serve import ServeProcess
from prometheus_client.parser import text_string_to_metric_families

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import clustersync, start_nodes, wait_until

JOB = "site"
RULES = """
[[rule]]
name = "dead"
check = "node_dead"
op = ">="
threshold = 1
labels = { severity = "page" }
"""
#: leases far longer than the death threshold, a slow site: the crawl outlasts the test
SETTINGS = {"CLUSTERSYNC_LEASE_TIMEOUT": "30", "CONCURRENT_REQUESTS": "4",
            "CONCURRENT_REQUESTS_PER_DOMAIN": "4"}


def nodes_of(serve: ServeProcess) -> list[dict[str, object]]:
    answer = serve.http.get(f"/api/jobs/{JOB}/nodes")
    return list(answer.json()) if answer.status_code == 200 else []


def node_id_of(serve: ServeProcess, pid: int) -> str:
    for node in nodes_of(serve):
        if node.get("pid") == pid:
            return str(node["id"])
    raise AssertionError(f"no node record has pid {pid}")


@pytest.mark.timing
def test_a_dead_node_fires_once_between_two_serves_and_resolves_once_when_it_is_back(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling, and two serve processes evaluating a dead-node rule every
    # 0.3 s, both posting to one webhook that refuses its first post
    web = site(2000, delay_s=0.1)
    rules = tmp_path / "alerts.toml"
    rules.write_text(RULES)
    with AlertReceiver(refuse=1) as hook:
        options = ("--alerts", str(rules), "--alert-webhook", hook.url, "--alert-every", "0.3")
        with ServeProcess(redis_server.url, tmp_path, *options) as one, \
                ServeProcess(redis_server.url, tmp_path, *options) as other:
            frozen, _alive = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                                         SETTINGS)
            wait_until(lambda: len(nodes_of(one)) == 2, 60, "two nodes")
            frozen_id = node_id_of(one, frozen.process.pid)
            time.sleep(1.5)  # several evaluations of both: nothing is dead
            assert hook.of("dead") == []
            # when one node is frozen past the dead threshold (the other declares it dead)
            frozen.process.send_signal(signal.SIGSTOP)
            wait_until(lambda: bool(hook.of("dead")), 30, "the dead-node alert")
            time.sleep(2)  # several more evaluations by both serve processes
            # then it fired once, for that node, after one retry of the refused post
            assert hook.of("dead") == [("firing", frozen_id, JOB)]
            assert hook.posts == 2
            body = hook.bodies[0]
            assert body["labels"] == {"job": JOB, "node": frozen_id, "severity": "page"}
            assert body["value"] == 1.0 and body["at"].endswith("+00:00")
            shown = one.http.get("/api/alerts").json()
            assert [(a["rule"], a["node"]) for a in shown["firing"]] == [("dead", frozen_id)]
            assert other.http.get("/api/alerts").json()["firing"] == shown["firing"]
            # when it is woken: it learns it was declared dead and rejoins
            frozen.process.send_signal(signal.SIGCONT)
            wait_until(lambda: len(hook.of("dead")) > 1, 30, "the alert to resolve")
            time.sleep(2)
            # then it resolved once, and nothing else was sent
            assert hook.of("dead") == [("firing", frozen_id, JOB), ("resolved", frozen_id, JOB)]
            assert one.http.get("/api/alerts").json()["firing"] == []
            recent = one.http.get("/api/alerts").json()["recent"]
            assert [(r["state"], r["node"]) for r in recent] == [
                ("resolved", frozen_id), ("firing", frozen_id)]
            # and /metrics still parses, with Redis's memory in it
            families = {f.name for f in text_string_to_metric_families(
                one.http.get("/metrics").text)}
            assert {"clustersync_redis_used_memory_bytes", "clustersync_node_up"} <= families
            assert "alert firing: dead" in one.log() + other.log()


@pytest.mark.parametrize(("text", "says"), [
    ('[[rule]]\nname = "x"\ncheck = "node_dead"\nop = "=>"\nthreshold = 1\n',
     "rule 'x': op must be one of"),
    ("[[rule]\n", "not TOML"),
])
def test_a_rules_file_that_does_not_fit_stops_serve_with_one_line(
    redis_server: RedisServer, tmp_path: Path, text: str, says: str
) -> None:
    rules = tmp_path / "alerts.toml"
    rules.write_text(text)
    run = clustersync(redis_server.url, "serve", "--alerts", str(rules))
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {rules}: ") and says in lines[0]


def test_serve_says_which_rules_it_evaluates(redis_server: RedisServer, tmp_path: Path) -> None:
    with ServeProcess(redis_server.url, tmp_path) as serve:
        answer = serve.http.get("/api/alerts").json()
    assert answer["evaluated"] and len(answer["rules"]) == 6
    assert "6 alert rule(s) from the default alert rules" in serve.log()
    assert json.dumps(answer["firing"]) == "[]"
