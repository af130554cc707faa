"""A task whose requests are all dropped on the node (its sent-fingerprint cache, or the
project's DUPEFILTER_CLASS) still has its record: success at once, its requests counted as
filtered, as for a task whose requests Redis's dedup drops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import clustersync, node_env, project_with_spiders, start_node, wait_all

SPIDERS = '''
    import scrapy
    from scrapy.dupefilters import RFPDupeFilter
    from w3lib.url import url_query_cleaner

    from example.spiders.site import SiteSpider


    class QueryBlindDupeFilter(RFPDupeFilter):
        def request_seen(self, request):
            return super().request_seen(request.replace(url=url_query_cleaner(request.url)))


    class DupTasksSpider(SiteSpider):
        """start() yields page 1, then the same page again for task "B" (a duplicate this node
        sent), then page 1 with a query for task "C" (a duplicate only for a query-blind
        DUPEFILTER_CLASS)."""

        name = "duptasks"

        async def start(self):
            page = self.start_url.replace("/page/0.html", "/page/1.html")
            yield scrapy.Request(page, callback=self.parse_leaf)
            yield scrapy.Request(page, callback=self.parse_leaf, meta={"clustersync_task": "B"})
            yield scrapy.Request(page + "?again=1", callback=self.parse_leaf,
                                 meta={"clustersync_task": "C"})

        def parse_leaf(self, response):
            yield {"url": response.url}
'''


@pytest.mark.parametrize("dupefilter", ["cluster", "project"])
def test_a_task_filtered_on_the_node_ends_success_at_once_with_its_requests_counted(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path, dupefilter: str
) -> None:
    # given a spider whose start() yields a request of task "B" that this node already sent
    # (and, with a query-blind DUPEFILTER_CLASS, one of task "C" it calls a duplicate)
    web = site(3)
    project = project_with_spiders(tmp_path, "duptasks", SPIDERS)
    settings = ({"DUPEFILTER_CLASS": "example.spiders.duptasks.QueryBlindDupeFilter"}
                if dupefilter == "project" else {})
    # when a node crawls it
    node = start_node("node1", redis_server.url, web.start_url, tmp_path, settings,
                      project_dir=project, spider="duptasks", env=node_env(tmp_path))
    wait_all([node], timeout_s=60)
    assert node.process.returncode == 0, node.log()[-3000:]
    # then task B has its record: success, no request queued, one filtered
    answer = clustersync(redis_server.url, "task", "duptasks", "B", "--json")
    assert answer.returncode == 0, answer.output
    task = json.loads(answer.stdout)
    assert (task["state"], task["requests"], task["filtered"], task["open"]) == (
        "success", 0, 1, 0)
    # and task C: filtered by the project's dupefilter, or a new page for the cluster's
    c_task = json.loads(clustersync(redis_server.url, "task", "duptasks", "C", "--json").stdout)
    expected = (0, 1) if dupefilter == "project" else (1, 0)
    assert (c_task["state"], (c_task["requests"], c_task["filtered"])) == ("success", expected)
