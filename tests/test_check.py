"""`clustersync check [--repair]` and `status --check`: a job broken on purpose in each way its
invariants forbid is found, mended where that is safe, and a crawl checked and repaired while
it runs loses nothing and is not "mended" at all."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.store import JobStore, Push, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.records import as_text
from testkit.redis_server import RedisServer

from cli_runner import CliRun
from conftest import SiteFactory
from support import (
    clustersync,
    missing_pages,
    node_env,
    open_barrier,
    pages_fetched_twice,
    project_with_spiders,
    start_node,
    start_nodes,
    wait_all,
    wait_until,
)

CODEC = RequestCodec(None, max_bytes=2**20)

HELD_SPIDER = '''
    from example.spiders.helpers import wait_for
    from example.spiders.site import SiteSpider


    class HeldSpider(SiteSpider):
        """The site spider, whose callbacks wait until the test opens the barrier "checked":
        the page being parsed stays leased, so no node of the job finishes before that."""

        name = "held"

        async def parse(self, response):
            await wait_for("checked")
            for result in super().parse(response):
                yield result
'''


def job_with_leases(url: str) -> tuple[JobStore, redis.Redis, list[str], list[str]]:
    """Job "shop": 10 requests (priority 0..9), 4 of them leased to node n1; returns the
    store, a client, the leased ids and the ids still queued."""
    store = JobStore(make_client(url), "shop", "n1")
    epoch = store.join(ttl_ms=60_000)[0]
    ops = [Push(bytes([i]) * 20, i, CODEC.encode(Request(f"http://a/{i}", priority=i)))
           for i in range(10)]
    store.flush(epoch, ops, new_call_id())
    leased = [lease.entry_id for lease in store.lease(epoch, 4, 60_000, new_call_id())]
    client = make_client(url)
    queued = [as_text(i) for i in client.zrange(store.keys.queue, 0, -1)]
    return store, client, leased, queued


def findings(url: str, *flags: str) -> tuple[int, list[dict[str, str]]]:
    done = clustersync(url, "check", "shop", "--json", *flags)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)["findings"]


Breakage = Callable[[JobStore, redis.Redis, list[str], list[str]], str]


def dead_owner(store: JobStore, client: redis.Redis, leased: list[str], _: list[str]) -> str:
    client.zrem(store.keys.nodes, "n1")  # n1 died and nobody declared it
    return leased[0]


def queued_too(store: JobStore, client: redis.Redis, leased: list[str], _: list[str]) -> str:
    client.zadd(store.keys.queue, {leased[0]: -5})
    return leased[0]


def no_entry_queued(store: JobStore, client: redis.Redis, _: list[str], queued: list[str]) -> str:
    client.hdel(store.keys.entries, queued[0])
    return queued[0]


def no_entry_leased(store: JobStore, client: redis.Redis, leased: list[str], _: list[str]) -> str:
    client.hdel(store.keys.entries, leased[0])
    return leased[0]


def no_deadline(store: JobStore, client: redis.Redis, leased: list[str], _: list[str]) -> str:
    client.zrem(store.keys.deadlines, leased[0])
    return leased[0]


def no_lease_record(store: JobStore, client: redis.Redis, leased: list[str], _: list[str]) -> str:
    client.hdel(store.keys.leased, leased[0])
    return leased[0]


def unqueued(store: JobStore, client: redis.Redis, _: list[str], queued: list[str]) -> str:
    client.zrem(store.keys.queue, queued[0])
    return queued[0]


@pytest.mark.parametrize(("breakage", "kind"), [
    (dead_owner, "lease_of_dead_node"),
    (queued_too, "queued_and_leased"),
    (no_entry_queued, "queued_without_entry"),
    (no_entry_leased, "leased_without_entry"),
    (no_deadline, "lease_without_deadline"),
    (no_lease_record, "deadline_without_lease"),
    (unqueued, "entry_unqueued"),
])
def test_check_finds_each_broken_invariant_and_repair_mends_it(
    redis_server: RedisServer, breakage: Breakage, kind: str,
) -> None:
    # given a job broken on purpose
    store, client, leased, queued = job_with_leases(redis_server.url)
    assert findings(redis_server.url) == (0, [])
    broken = breakage(store, client, leased, queued)
    # when it is checked: the finding is named, with its entry, and nothing changes
    code, found = findings(redis_server.url)
    assert code == 1
    assert (kind, broken) in {(f["kind"], f["subject"]) for f in found}, found
    assert all(f["action"] == "" for f in found)
    assert findings(redis_server.url)[1] == found
    # when it is repaired
    code, repaired = findings(redis_server.url, "--repair")
    # then each entry finding says what was done, and the job checks clean afterwards; but for
    # a request whose entry was lost, the counters keep saying that one request went missing
    assert all(f["action"] for f in repaired if f["kind"] != "counts"), repaired
    code, after = findings(redis_server.url)
    if kind.endswith("without_entry"):
        assert code == 1 and [(f["kind"], f["subject"]) for f in after] == [
            ("counts", "counters")], after
        assert "does not bound the 9 requests" in after[0]["detail"]
    else:
        assert (code, after) == (0, [])
    # and every request that still has its entry is queued or leased, in its place
    entries = {as_text(i) for i in client.hkeys(store.keys.entries)}
    held = {as_text(i) for i in client.zrange(store.keys.queue, 0, -1)} | {
        as_text(i) for i in client.hkeys(store.keys.leased)}
    assert entries == held
    if kind in ("entry_unqueued", "lease_of_dead_node"):
        blob = client.hget(store.keys.entries, broken)
        assert isinstance(blob, bytes)  # back in the queue with its own priority
        assert client.zscore(store.keys.queue, broken) == -CODEC.decode(blob).priority


def test_nodes_on_other_code_are_flagged_by_check_and_status_check(
    redis_server: RedisServer,
) -> None:
    # given three live nodes, the third with another DOWNLOAD_DELAY and another spider file
    store, client, _, _ = job_with_leases(redis_server.url)
    for node, delay, spider in (("n1", None, "aaaa0000"), ("n2", None, "aaaa0000"),
                                ("n3", "22222222", "bbbb1111")):
        settings = {"BOT_NAME": "0f0f0f0f", **({"DOWNLOAD_DELAY": delay} if delay else {})}
        client.zadd(store.keys.nodes, {node: 2**50})
        client.hset(store.keys.node_info, node, json.dumps(
            {"digest": node, "setting_digests": settings,
             "file_digests": {"spiders/site.py": spider}, "versions": {"scrapy": "2.19"},
             "updated": 0}))
    # when the job is checked, and its status checked
    code, found = findings(redis_server.url)
    status = clustersync(redis_server.url, "status", "shop", "--check")
    # then the setting and the file are named, with which node has what, and both exit 1
    assert code == 1 and [(f["kind"], f["subject"]) for f in found] == [
        ("nodes_differ", "DOWNLOAD_DELAY"), ("nodes_differ", "file spiders/site.py")]
    assert status.returncode == 1
    assert ("needs attention: DOWNLOAD_DELAY differs: nodes n1, n2 Scrapy's default; node n3 "
            "22222222: the nodes crawl differently") in status.stdout
    assert ("needs attention: file spiders/site.py differs: nodes n1, n2 aaaa0000; node n3 "
            "bbbb1111: the nodes run different code") in status.stdout


def test_status_check_names_a_dead_node_holding_work_and_dead_letters(
    redis_server: RedisServer,
) -> None:
    # given a healthy job: status --check exits 0 and says so
    store, client, _, _ = job_with_leases(redis_server.url)
    healthy = clustersync(redis_server.url, "status", "shop", "--check")
    assert healthy.returncode == 0 and "check: nothing needs a person" in healthy.stdout
    # when its node dies holding 4 leases, and a dead letter is recorded
    client.zrem(store.keys.nodes, "n1")
    client.lpush(store.keys.dead, "-\tn1\t0\ttest\nx")
    result = clustersync(redis_server.url, "status", "shop", "--check", "--json")
    # then both are named and the exit code is 1
    assert result.returncode == 1
    assert json.loads(result.stdout)["needs_attention"] == [
        "node n1 is not alive and still holds 4 lease(s)",
        "1 dead letter(s): `clustersync dead` lists them"]


def test_nodes_and_top_show_every_node(redis_server: RedisServer) -> None:
    store, client, _, _ = job_with_leases(redis_server.url)
    client.hset(store.keys.node_info, "n1", json.dumps({"host": "web-7", "pages": 12,
                                                        "updated": 0}))
    listed = clustersync(redis_server.url, "nodes", "shop", "--json")
    assert [(n["id"], n["host"]) for n in json.loads(listed.stdout)] == [("n1", "web-7")]
    top = clustersync(redis_server.url, "top", "shop", "--count", "2", "--interval", "0.1")
    assert top.returncode == 0 and "web-7" in top.stdout and "queued" in top.stdout
    assert clustersync(redis_server.url, "nodes", "nope").returncode == 3


def test_check_and_repair_during_a_crawl_find_nothing_and_lose_nothing(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two nodes crawling 300 pages
    web = site(300, delay_s=0.02)
    nodes = start_nodes(2, redis_server.url, web.start_url, tmp_path,
                        settings={"CLUSTERSYNC_JOB": "shop"})
    # when check --repair runs again and again while they crawl
    reports: list[CliRun] = []
    deadline = time.monotonic() + 120
    while any(node.process.poll() is None for node in nodes) and time.monotonic() < deadline:
        reports.append(clustersync(redis_server.url, "check", "shop", "--repair", "--json"))
        time.sleep(0.02)  # pacing only: leave the two cores to the nodes between checks
    wait_all(nodes, timeout_s=10)
    # then every page was fetched once, and no check found (or mended) anything
    assert missing_pages(web) == [] and pages_fetched_twice(web) == {}
    ran = [r for r in reports if r.returncode != 3]  # 3: before the job existed
    assert len(ran) >= 3, [r.stderr for r in reports]
    for report in ran:
        found = json.loads(report.stdout)["findings"]
        # the test nodes differ in USER_AGENT (the site counts hits by it), which is in their
        # digest: that finding is right, and is the only one
        assert {f["kind"] for f in found} <= {"nodes_differ"}, found
        assert report.returncode == (1 if found else 0), report.stderr


def test_a_node_started_with_other_settings_is_flagged_by_status_check_and_check(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given three nodes of one job crawling, the third with another DOWNLOAD_DELAY; their
    # spider holds its first page until the checks ran, so none of them finishes before
    web = site(20)
    project = project_with_spiders(tmp_path, "held", HELD_SPIDER)
    same = {"CLUSTERSYNC_JOB": "shop", "USER_AGENT": "crawler"}
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=project, spider="held", env=node_env(tmp_path))
             for name, settings in (("node1", same), ("node2", same),
                                    ("odd", {**same, "DOWNLOAD_DELAY": "0.01"}))]
    odd = nodes.pop()
    try:
        # when all three are live, the job is checked
        def all_live() -> bool:
            listed = clustersync(redis_server.url, "nodes", "shop", "--json")
            return listed.returncode == 0 and sum(
                1 for n in json.loads(listed.stdout) if n["alive"] and n.get("digest")) == 3

        wait_until(all_live, timeout_s=60, what="three live nodes")
        status = clustersync(redis_server.url, "status", "shop", "--check", "--json")
        checked = clustersync(redis_server.url, "check", "shop", "--json")
    finally:
        open_barrier(tmp_path, "checked")
        wait_all([*nodes, odd], timeout_s=120)
    # then the odd node, found by its pid, is the one named, by both commands
    records = {n["pid"]: n["id"] for n in json.loads(status.stdout)["nodes"]}
    odd_id = records[odd.process.pid]
    assert status.returncode == 1
    others = ", ".join(sorted(i for i in records.values() if i != odd_id))
    odd_delay = next(n for n in json.loads(status.stdout)["nodes"]
                     if n["id"] == odd_id)["setting_digests"]["DOWNLOAD_DELAY"]
    assert [line for line in json.loads(status.stdout)["needs_attention"]
            if "differs" in line] == [
        f"DOWNLOAD_DELAY differs: nodes {others} Scrapy's default; node {odd_id} {odd_delay}: "
        "the nodes crawl differently"]
    found = json.loads(checked.stdout)["findings"]
    assert checked.returncode == 1
    assert [(f["kind"], f["subject"]) for f in found if f["kind"] == "nodes_differ"] == [
        ("nodes_differ", "DOWNLOAD_DELAY")]
