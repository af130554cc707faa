"""`clustersync serve` beside a real crawl: two `scrapy crawl` nodes, a real redis-server, serve
as a subprocess. What the API answers is what `clustersync status --json` says, a pause sent
over HTTP stops every node within a second (counted on the test site) and a resume finishes the
crawl, and /metrics parses with one series per node."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from api_serve import ServeProcess, metric_samples

from testkit.redis_server import RedisServer
from testkit.site import TestSite

from conftest import SiteFactory
from support import (
    clustersync,
    pages_fetched,
    pages_fetched_twice,
    start_nodes,
    wait_all,
    wait_until,
)

JOB = "site"  # the example spider's name, so the job's name
SLOW = {"CONCURRENT_REQUESTS_PER_DOMAIN": "4", "CONCURRENT_REQUESTS": "4"}


def cli_json(url: str, *args: str) -> Any:
    answer = clustersync(url, *args, "--json")
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def paused_at(server: RedisServer) -> float:
    """When Redis recorded the job's last control change, on time.monotonic()'s clock."""
    since_ms = int(server.client().hget(f"clustersync:{{{JOB}}}:meta", "control_ms") or 0)
    return since_ms / 1000 - (time.time() - time.monotonic())


def last_hit(web: TestSite, agents: list[str]) -> float:
    return max(web.agent_hits(agent).last or 0.0 for agent in agents)


def hits_after(web: TestSite, agents: list[str], moment: float) -> int:
    return sum(sum(t > moment for t in web.agent_hits(agent).times) for agent in agents)


def steady(status: dict[str, Any]) -> dict[str, Any]:
    """What of a status cannot move while the job is paused and quiet (heartbeats still
    refresh the nodes' clocks, CPU and rates)."""
    return {
        "figures": {name: status[name] for name in (
            "job", "state", "control", "queued", "leased", "done", "seen", "dead_letters",
            "counters", "start_claimed_by", "start_done")},
        "run": status["run"]["number"],
        "nodes": {n["id"]: (n["state"], n["alive"], n.get("pages"), n.get("leased"))
                  for n in status["nodes"]},
    }


@pytest.mark.timing
def test_the_api_shows_what_the_cli_shows_and_its_pause_and_resume_steer_two_nodes(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given serve, and two nodes crawling a slow site
    web = site(300, delay_s=0.1)
    with ServeProcess(redis_server.url, tmp_path) as serve:
        nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path, SLOW)
        names = [node.name for node in nodes]
        wait_until(lambda: all(web.agent_hits(n).hits for n in names)
                   and pages_fetched(web) > 40, 30, "both nodes to crawl")
        # when the job is paused over HTTP
        paused = serve.http.post(f"/api/jobs/{JOB}/pause")
        assert paused.status_code == 200, paused.text
        assert paused.json()["after"] == "paused"
        time.sleep(3)
        # then every node stopped fetching within 1 s of the pause Redis recorded
        pause_at = paused_at(redis_server)
        stopped_after_s = last_hit(web, names) - pause_at
        print(f"\napi pause: last page fetched {stopped_after_s:.3f}s after Redis recorded it")
        assert stopped_after_s < 1.0
        assert hits_after(web, names, pause_at + 1.0) == 0
        # and the job's status and nodes are what the CLI says
        api_status = serve.http.get(f"/api/jobs/{JOB}").json()
        assert steady(api_status) == steady(cli_json(redis_server.url, "status", JOB))
        assert api_status["state"] == "paused" and len(api_status["nodes"]) == 2
        api_nodes = serve.http.get(f"/api/jobs/{JOB}/nodes").json()
        cli_nodes = cli_json(redis_server.url, "nodes", JOB)
        assert [(n["id"], n["group"], n["state"]) for n in api_nodes] == \
            [(n["id"], n["group"], n["state"]) for n in cli_nodes]
        # and the metrics parse, with the queue depth and one series per node
        scraped = serve.http.get("/metrics")
        assert scraped.status_code == 200
        samples = metric_samples(scraped.text)
        assert samples["clustersync_job_queued"] == [({"job": JOB}, float(api_status["queued"]))]
        up = samples["clustersync_node_up"]
        assert sorted(labels["node"] for labels, _ in up) == sorted(n["id"] for n in api_nodes)
        assert [value for _, value in up] == [1.0, 1.0]
        assert len(samples["clustersync_node_memory_rss_bytes"]) == 2
        assert samples["clustersync_redis_up"] == [({}, 1.0)]
        # when it is resumed over HTTP
        resumed = serve.http.post(f"/api/jobs/{JOB}/resume")
        assert resumed.status_code == 200 and resumed.json()["after"] == "running"
        # then the crawl finishes with every page fetched exactly once
        wait_all(nodes, timeout_s=60)
        assert [node.process.returncode for node in nodes] == [0, 0]
        assert pages_fetched(web) == web.pages and not pages_fetched_twice(web)
        # and both writes are in the audit list, made by "local" (no token exists)
        audit = serve.http.get("/api/audit").json()
        assert [(a["action"], a["who"], a["job"]) for a in audit] == [
            ("resume", "local", JOB), ("pause", "local", JOB)]
