"""Numbers a person can trust: `clustersync status` and `nodes` show the figures and the nodes of
the run under way (the job's totals beside them), sum up the nodes of earlier runs in one line,
and show a node gone without a word as silent or dead, never as crawling. Real `scrapy crawl`
nodes against a site served by the test; the CLI in-process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from scrapy_clustersync.store import Ack, StartDone
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    clustersync,
    joined,
    pages_fetched,
    push_op,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

#: no test here measures the idle close; each crawl to a job's end waits it out
QUICK_CLOSE = {"CLUSTERSYNC_IDLE_CLOSE_AFTER": "0.3"}


def status_of(url: str, *args: str) -> dict[str, Any]:
    result = clustersync(url, "status", "site", "--json", *args)
    assert result.returncode == 0, result.output
    status: dict[str, Any] = json.loads(result.stdout)
    return status


def crawl(url: str, start_url: str, workdir: Path, count: int = 1) -> None:
    nodes = start_nodes(count, url, start_url, workdir, QUICK_CLOSE)
    wait_all(nodes, timeout_s=120)
    for node in nodes:
        assert node.process.returncode == 0, node.log()[-3000:]


def test_status_after_a_restart_shows_this_runs_figures_and_waits_for_nodes(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a 20-page site crawled to its end, then restarted forgetting what it has seen
    web = site(20)
    crawl(redis_server.url, web.start_url, tmp_path / "first")
    restarted = clustersync(redis_server.url, "restart", "site", "--forget-seen", "--yes")
    assert restarted.returncode == 0, restarted.output
    # when its status is read
    status = status_of(redis_server.url)
    text = clustersync(redis_server.url, "status", "site").stdout
    # then it waits for nodes (not "finished"), in run 2, with nothing done in it yet, and the
    # job's totals beside
    print(json.dumps({"run": status["run"], "totals": status["totals"]}))
    assert status["state"] == "waiting for nodes" and "state waiting for nodes" in text
    assert "finished" not in text.split("node")[0]
    assert (status["run"]["number"], status["run"]["done"], status["run"]["pages"],
            status["run"]["seen"]) == (2, 0, 0, 0)
    assert (status["totals"]["done"], status["totals"]["pages"]) == (20, 20)
    # and once the second run crawled the site again, this run's figures are one site's worth
    crawl(redis_server.url, web.start_url, tmp_path / "second")
    status = status_of(redis_server.url)
    text = clustersync(redis_server.url, "status", "site").stdout
    print(json.dumps({"run": status["run"], "totals": status["totals"]}))
    assert pages_fetched(web) == 40 and status["state"] == "finished"
    assert (status["run"]["done"], status["run"]["pages"], status["run"]["seen"]) == (20, 20, 20)
    assert (status["totals"]["done"], status["totals"]["pages"]) == (40, 40)
    assert re.search(r"done\s+20\s+40\b", text), text


def test_a_seed_into_a_finished_job_shows_it_waiting_for_nodes_not_finished(
    redis_server: RedisServer,
) -> None:
    # given a job whose node did its one request, found the job finished and left
    node, epoch = joined(redis_server, "a", job="site")
    node.flush(epoch, [push_op("http://x/1"), StartDone()], new_call_id())
    [entry] = node.lease(epoch, 1, 60_000, new_call_id())
    node.flush(epoch, [Ack(entry.entry_id)], new_call_id())
    beat: dict[str, Any] = {"lease_ms": 60_000, "idle": True, "idle_after_ms": 1, "lease_ids": []}
    wait_until(lambda: node.heartbeat(epoch, ttl_ms=5000, info={}, **beat).finished, 10,
               "the job is finished")
    node.heartbeat(epoch, ttl_ms=0, info={"state": "closed"}, **beat)
    assert status_of(redis_server.url)["state"] == "finished"
    # when a new URL is seeded into it
    assert clustersync(redis_server.url, "seed", "site", "http://x/2").returncode == 0
    # then it waits for nodes, with no finish shown
    status = status_of(redis_server.url)
    text = clustersync(redis_server.url, "status", "site").stdout
    assert (status["state"], status["queued"], status["finished_at"]) == (
        "waiting for nodes", 1, None)
    assert "state waiting for nodes" in text and "finished" not in text, text


def test_a_three_node_job_run_twice_lists_its_three_nodes_and_sums_up_the_earlier_run(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job crawled by three nodes, restarted, and crawled again by three new nodes (a
    # slow site: every node has joined before the crawl ends)
    web = site(40, delay_s=1.0)
    crawl(redis_server.url, web.start_url, tmp_path / "first", count=3)
    first = {n["id"] for n in status_of(redis_server.url, "--all")["nodes"]}
    assert clustersync(redis_server.url, "restart", "site", "--forget-seen",
                       "--yes").returncode == 0
    crawl(redis_server.url, web.start_url, tmp_path / "second", count=3)
    every = {n["id"] for n in status_of(redis_server.url)["nodes"]}
    second = every - first
    assert len(first) == 3 and len(second) == 3
    # when status and nodes are read, with and without --all
    status = clustersync(redis_server.url, "status", "site").stdout
    status_all = clustersync(redis_server.url, "status", "site", "--all").stdout
    nodes = clustersync(redis_server.url, "nodes", "site").stdout
    nodes_all = clustersync(redis_server.url, "nodes", "site", "--all").stdout
    tagged = json.loads(clustersync(redis_server.url, "nodes", "site", "--json").stdout)
    print(status, nodes_all, sep="\n")

    # then the three nodes of this run are listed, the earlier run's summed up in one line
    def listed(text: str) -> set[str]:
        return {node for node in every if node in text}

    assert listed(status) == second and listed(nodes) == second
    assert "+3 node(s) of earlier runs: --all to list" in status
    assert "+3 node(s) of earlier runs: --all to list" in nodes
    # and --all lists all six
    assert listed(status_all) == every and listed(nodes_all) == every
    assert sorted(n["group"] for n in tagged) == ["earlier run"] * 3 + ["this run"] * 3


def test_a_lone_node_killed_with_kill_9_is_shown_silent_then_dead_never_crawling(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a lone node killed with kill -9 in the middle of a slow crawl
    web = site(200, delay_s=0.2)
    node = start_node("lone", redis_server.url, web.start_url, tmp_path, QUICK_CLOSE)
    wait_until(lambda: pages_fetched(web) >= 5, 60, "the node fetches pages")
    node.kill()
    # when its dead-after (3 s) has passed, no other node being there to declare it dead
    wait_until(lambda: status_of(redis_server.url)["nodes"][0]["silent_s"] > 6, 30,
               "the node has been silent for 6 s")
    status = status_of(redis_server.url)
    text = clustersync(redis_server.url, "status", "site").stdout
    nodes = clustersync(redis_server.url, "nodes", "site").stdout
    print(text, nodes, sep="\n")
    # then status and nodes show it silent for as long as it has been, never crawling
    [record] = status["nodes"]
    assert record["state"] == "silent" and not record["alive"]
    assert re.search(r"silent for [6-9]\d*s|silent for \d\d+s", text), text
    assert "silent for" in nodes and "crawling" not in text + nodes
    # and a node that joins later declares it dead, saying how long it had been silent (the
    # Redis clock's figure, not the 3 s threshold), and status shows it dead
    silent_s = float(status_of(redis_server.url)["nodes"][0]["silent_s"])
    later = start_node("later", redis_server.url, web.start_url, tmp_path, QUICK_CLOSE)
    wait_until(lambda: "declared dead" in later.log(), 60, "the later node declares it dead")
    said = re.search(r"sent no heartbeat for ([\d.]+)s", later.log())
    assert said and float(said.group(1)) >= silent_s, later.log()[-3000:]
    dead = [n for n in status_of(redis_server.url)["nodes"] if n["id"] == record["id"]]
    assert dead[0]["state"] == "dead"
    wait_all([later], timeout_s=120)
