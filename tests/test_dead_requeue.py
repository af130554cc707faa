"""`clustersync dead JOB --requeue`: a request dead-lettered by a real node (its callback missing
from the spider) is put back once the spider is fixed, and crawled exactly once; running the
requeue again changes nothing, and `clustersync check`'s count invariants still hold."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import (
    clustersync,
    marks,
    missing_pages,
    node_env,
    pages_fetched_twice,
    project_with_spiders,
    start_node,
    wait_all,
)

DETAIL_SPIDER = '''
    from example.spiders.helpers import mark
    from example.spiders.site import SiteSpider


    class DetailSpider(SiteSpider):
        """The site spider; a request seeded with callback parse_detail needs that method."""

        name = "detail"
'''
FIXED_METHOD = '''
        def parse_detail(self, response):
            mark("detail", f"{self.settings.get('USER_AGENT')} {response.url}")
            yield {"url": response.url, "detail": True}
'''


def test_a_dead_letter_requeued_after_its_cause_is_fixed_is_crawled_exactly_once(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a job whose queue holds a request for callback parse_detail, which the spider lacks
    web = site(10)
    project = project_with_spiders(tmp_path, "detail", DETAIL_SPIDER)
    detail_url = web.start_url + "?detail"
    seeded = clustersync(redis_server.url, "seed", "detail", "--create", detail_url,
                         "--callback", "parse_detail")
    assert seeded.returncode == 0, seeded.output
    # and a node crawled the job to its end: the request was dead-lettered, not fetched
    first = start_node("first", redis_server.url, web.start_url, tmp_path, project_dir=project,
                       spider="detail", env=node_env(tmp_path))
    wait_all([first])
    [letter] = json.loads(clustersync(redis_server.url, "dead", "detail", "--json").stdout)
    assert "parse_detail" in letter["reason"], letter
    assert web.times_requested("first", "/page/0.html?detail") == 0
    # when the spider is fixed, the dead letter requeued (twice: a retry changes nothing more)
    spider_file = project / "example" / "spiders" / "detail.py"
    spider_file.write_text(textwrap.dedent(DETAIL_SPIDER + FIXED_METHOD))
    requeued = clustersync(redis_server.url, "dead", "detail", "--requeue", "--all", "--json")
    again = clustersync(redis_server.url, "dead", "detail", "--requeue", letter["entry_id"],
                        "--json")
    # and a node runs the job again
    second = start_node("second", redis_server.url, web.start_url, tmp_path,
                        project_dir=project, spider="detail", env=node_env(tmp_path))
    wait_all([second])
    # then the first requeue put it back, the second found nothing to do
    assert requeued.returncode == 0 and json.loads(requeued.stdout)["requeued"] == 1, requeued
    assert again.returncode == 0, again.output
    assert json.loads(again.stdout)["requeued"] == 0
    assert json.loads(again.stdout)["not_found"] == [letter["entry_id"]]
    # and the request was fetched and its callback run exactly once, by the second node only
    assert marks(tmp_path, "detail") == [f"second {web.url}/page/0.html?detail"]
    assert web.times_requested("second", "/page/0.html?detail") == 1
    # (the site counts hits by path: page 0 was fetched by start() and as "?detail")
    assert missing_pages(web) == [] and pages_fetched_twice(web) == {"/page/0.html": 2}
    assert second.finish_reason() == "finished" and second.process.returncode == 0
    # and nothing is left dead, and every invariant of the job holds (counts included)
    assert json.loads(clustersync(redis_server.url, "dead", "detail", "--json").stdout) == []
    checked = clustersync(redis_server.url, "check", "detail", "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["findings"] == [], checked
