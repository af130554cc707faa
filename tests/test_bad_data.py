"""Bad data never stops the crawl: it is dead-lettered, or kept on its node, with its reason."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from scrapy.settings import Settings
from unit.thread_harness import NodeThread

from scrapy_clustersync.config import ClusterConfig
from scrapy_clustersync.store import JobStore, Push, PushFlags, StoreError, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.records import as_text
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    joined,
    missing_pages,
    node_env,
    project_with_spiders,
    push_op,
    start_node,
    wait_all,
    wait_until,
)


def test_an_undecodable_queue_entry_is_dead_lettered_and_the_crawl_completes(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a job whose queue holds an entry no node can decode
    web = site(100)
    store = JobStore(make_client(redis_server.url), "site", "test")
    epoch = store.ensure_job()
    undecodable = Push(b"", 100, b"\xc1 not an envelope", flags=PushFlags.DONT_FILTER)
    store.flush(epoch, [undecodable], new_call_id())
    # when a node crawls the job
    node = start_node("node1", redis_server.url, web.start_url, tmp_path)
    wait_all([node])
    # then the entry is in the dead letters with its reason, and every page was still fetched
    [letter] = store.dead_letters()
    assert "not a msgpack envelope" in letter.reason
    assert letter.entry == b"\xc1 not an envelope"
    assert "moved to the job's dead letters" in node.log()
    assert missing_pages(web) == []
    assert node.finish_reason() == "finished"


BAD_META_SPIDER = '''
    import scrapy
    from example.spiders.site import SiteSpider


    class BadMetaSpider(SiteSpider):
        name = "badmeta"

        def parse(self, response):
            yield from super().parse(response)
            if response.url.endswith("/page/0.html"):
                yield response.follow("/page/0.html?handle", meta={"db_handle": object()})
'''


def test_a_request_with_unencodable_meta_is_crawled_on_its_node_with_a_clear_warning(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a spider that yields one request whose meta holds a live object
    project = project_with_spiders(tmp_path, "badmeta", BAD_META_SPIDER)
    web = site(60)
    # when it crawls
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, project_dir=project,
                      spider="badmeta")
    wait_all([node])
    # then the warning names the request and the meta key, and the whole site is crawled
    log = node.log()
    assert "Unable to serialize request: <GET http://127.0.0.1:" in log
    assert "/page/0.html?handle> - reason: meta['db_handle'] holds a value of type object" in log
    assert "it is crawled on this node only and is not crash-safe" in log
    assert missing_pages(web) == []
    assert node.finish_reason() == "finished"


def test_a_node_that_cannot_reach_redis_at_start_says_so_and_stops(
    site: SiteFactory, tmp_path: Path
) -> None:
    web = site(5)
    node = start_node("node1", "redis://127.0.0.1:1/0", web.start_url, tmp_path)
    wait_all([node], timeout_s=60)
    assert "cannot join job 'site' at redis://127.0.0.1:1/0" in node.log()
    assert node.finish_reason() == "clustersync_redis_unreachable"
    assert web.hits() == {}


def test_a_bad_setting_stops_the_node_with_the_setting_named(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    web = site(5)
    node = start_node("node1", redis_server.url, web.start_url, tmp_path,
                      {"CLUSTERSYNC_LEASE_TIMEOUT": "soon"})
    wait_all([node], timeout_s=60)
    assert "CLUSTERSYNC_LEASE_TIMEOUT = 'soon' is not a number" in node.log()
    assert node.process.returncode != 0 and "Engine slot not assigned" not in node.log()
    assert web.hits() == {}


# ---- a batch Redis refuses for a key of the wrong type ------------------------------------------

def test_a_batch_redis_refuses_for_a_foreign_key_of_the_wrong_type_changes_nothing(
    redis_server: RedisServer,
) -> None:
    """docs/guarantees.md: "a write Redis refuses for what it holds (a bug, a foreign key of
    the wrong type): every script validates every op before its first write, so a refused
    batch changes nothing". flush.lua validates op *shapes* only; a key of the wrong type
    fails mid-script (here the stats hash, written last), and Redis does not roll a script
    back: the pushes are applied, the call id is not recorded."""
    store, epoch = joined(redis_server)
    client = redis_server.client()
    client.set("clustersync:{job}:stats", "a foreign string")
    with contextlib.suppress(StoreError):
        store.flush(epoch, [push_op("http://a/1"), push_op("http://a/2")], new_call_id())
    # a refused batch changes nothing
    assert client.zcard("clustersync:{job}:queue") == 0


def test_a_node_whose_batch_redis_refuses_for_a_wrong_type_keeps_it_and_sends_it_once_mended(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The same, seen from the node. A key of the job that another program overwrote is not
    the batch's fault: the node says which key and what to do, keeps its writes (nothing is
    applied, nothing dead-lettered), and sends them once the key is mended."""
    config = ClusterConfig.from_settings(
        Settings({"CLUSTERSYNC_REDIS_URL": redis_server.url}), "job")
    store = JobStore(make_client(redis_server.url), "job", config.node_id)
    epoch = store.join(ttl_ms=60_000)[0]
    client = redis_server.client()
    client.set("clustersync:{job}:stats", "a foreign string")
    worker = NodeThread(store, config, epoch)
    worker.start()
    worker.submit(push_op("http://a/1"))
    worker.submit(push_op("http://a/2"))
    wait_until(lambda: "holds a string, not a hash" in caplog.text, 10, "the error")
    assert client.hlen("clustersync:{job}:entries") == 0
    assert "delete or rename that key" in caplog.text
    client.delete("clustersync:{job}:stats")
    wait_until(lambda: client.hlen("clustersync:{job}:entries") == 2, 10, "the writes")
    assert not worker.close(unacked=[])


# ---- an error text UTF-8 cannot encode ----------------------------------------------------------

def test_a_failed_request_whose_error_text_holds_a_lone_surrogate_does_not_wedge_the_node(
    redis_server: RedisServer, site: SiteFactory, fault_project: Path,
    tmp_path: Path,
) -> None:
    # given a spider whose callback for page 3 raises an error with text from a JSON API that
    # holds half an emoji (a lone surrogate, which UTF-8 cannot encode)
    web = site(30)
    # when a node crawls the site
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, {},
                      project_dir=fault_project, spider="surrogate", env=node_env(tmp_path))
    # then it finishes with every page, and the failure is recorded
    wait_all([node], timeout_s=40)
    failed = redis_server.client().lrange("clustersync:{surrogate}:failed", 0, -1)
    print(f"finish reason {node.finish_reason()}, failed records {len(failed)}")
    assert missing_pages(web) == []
    assert node.finish_reason() == "finished"
    assert len(failed) == 1 and "ValueError" in as_text(failed[0])
