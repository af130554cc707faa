"""Nodes reach Redis through Sentinel (``redis+sentinel://``): when the primary is killed and a
replica promoted, they find the new primary and go on; nothing is lost, and ``clustersync
status`` says where the job is and that it failed over. (A failover behind a fixed address is
tests/test_failover.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_clustersync.store.primary_note import PrimaryScript, primary_address
from scrapy_clustersync.store.records import as_text
from testkit.redis_ha import SentinelGroup

from conftest import SiteFactory, require_redis_server
from support import (
    clustersync,
    joined,
    missing_pages,
    pages_fetched,
    start_nodes,
    wait_all,
    wait_until,
)

#: pages long enough to crawl that the primary dies half way through
PAGES = 300
#: the page count fetched before the primary is killed
KILL_AFTER = 60


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    require_redis_server()
    with SentinelGroup(tmp_path / "ha") as group:
        yield group


def test_two_nodes_go_on_through_a_failover_and_fetch_every_page(
    sentinels: SentinelGroup, site: SiteFactory, tmp_path: Path,
) -> None:
    # given two nodes crawling a site through Sentinel
    web = site(PAGES, delay_s=0.02)
    nodes = start_nodes(2, sentinels.url, web.start_url, tmp_path,
                        {"CONCURRENT_REQUESTS": "4"})
    wait_until(lambda: pages_fetched(web) >= KILL_AFTER, 60, f"{KILL_AFTER} pages fetched")
    first = sentinels.primary
    # when the primary is killed (SIGKILL) mid-crawl, and the sentinels promote the replica
    first.kill()
    promoted = sentinels.wait_for_failover(first.port)
    wait_all(nodes, timeout_s=90)
    # then every page was fetched and both nodes finished with exit code 0
    assert missing_pages(web) == []
    assert [node.process.returncode for node in nodes] == [0, 0]
    assert pages_fetched(web) >= PAGES
    # and a node that saw the primary change logged it; status shows the job's primary now
    assert any("Sentinel failed over" in node.log() for node in nodes)
    run = clustersync(sentinels.url, "status", "site", "--json")
    assert run.returncode == 0, run.output
    primary = json.loads(run.stdout)["primary"]
    assert primary["address"] == f"127.0.0.1:{promoted.port}"
    assert (primary["failovers"], primary["before"]) == (1, f"127.0.0.1:{first.port}")
    text = clustersync(sentinels.url, "status", "site").stdout
    assert f"primary      127.0.0.1:{promoted.port} (through Sentinel); failed over 1" in text
    # and if the replica had not received every write, the nodes said so (a rollback)
    rolled_back = sum("came back older than this node saw it" in node.log() for node in nodes)
    print(f"nodes that saw a rollback: {rolled_back}")


def test_the_primary_is_recorded_once_and_a_change_counted_once(
    sentinels: SentinelGroup,
) -> None:
    # given a job joined through Sentinel
    store, _ = joined(sentinels.url)
    address = primary_address(store.client)
    assert address == f"127.0.0.1:{sentinels.primary.port}"
    script = PrimaryScript(store.client, store.keys)
    # when two nodes record the same primary, then another one
    assert script.run(address) == "" and script.run(address) == ""
    assert script.run("10.0.0.9:6379") == address
    assert script.run("10.0.0.9:6379") == ""
    # then one change is counted
    meta = {as_text(k): as_text(v) for k, v in store.client.hgetall(store.keys.meta).items()}
    assert (meta["primary"], meta["primary_before"], meta["primary_changes"]) == (
        "10.0.0.9:6379", address, "1")


def test_the_primary_is_not_recorded_for_a_job_that_is_not_there(
    sentinels: SentinelGroup,
) -> None:
    store, _ = joined(sentinels.url)
    store.client.delete(store.keys.meta)
    assert PrimaryScript(store.client, store.keys).run("10.0.0.9:6379") is None
    assert not store.client.exists(store.keys.meta)


def test_writes_the_replica_never_received_are_a_rollback_and_crawled_again(
    tmp_path: Path, site: SiteFactory,
) -> None:
    # given two nodes crawling through Sentinel, with the replica cut from the primary
    # mid-crawl: what the primary confirms from then on is lost in the failover
    require_redis_server()
    group = SentinelGroup(tmp_path / "ha", cuttable=True, failover_timeout_ms=120_000)
    with group:
        web = site(PAGES, delay_s=0.02)
        nodes = start_nodes(2, group.url, web.start_url, tmp_path, {"CONCURRENT_REQUESTS": "4"})
        wait_until(lambda: pages_fetched(web) >= KILL_AFTER, 60, f"{KILL_AFTER} pages fetched")
        group.cut_replication()
        cut_at = pages_fetched(web)
        wait_until(lambda: pages_fetched(web) >= cut_at + 20, 60, "20 more pages fetched")
        # when the primary is killed and the lagging replica promoted
        first = group.primary
        first.kill()
        group.wait_for_failover(first.port)
        wait_all(nodes, timeout_s=90)
    # then the nodes saw Redis come back older, crawled again what was lost, and finished
    assert any("came back older than this node saw it" in node.log() for node in nodes)
    assert missing_pages(web) == []
    assert [node.process.returncode for node in nodes] == [0, 0]
