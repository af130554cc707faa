"""Bad data never stops the crawl: it is dead-lettered, or kept on its node, with its reason."""

from __future__ import annotations

from pathlib import Path

from scrapy_clustersync.store import JobStore, Push, PushFlags, make_client
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import missing_pages, project_with_spiders, start_node, wait_all


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
