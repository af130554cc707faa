"""Tasks and failed requests in a real crawl: two `scrapy crawl` nodes, `clustersync` reads.

Task "tree" crawls a tree of 40 pages (the children inherit the task), task "broken" has a child
whose page answers 500 and one that cannot be downloaded at all; a request of the tree names a
task of its own. The records say what a person asks: which tasks succeeded, which failed, where,
on which node and why; the failed list says the same without tasks.
"""

from __future__ import annotations

import json
from pathlib import Path

from scrapy_clustersync.store.records import as_text
from testkit.redis_server import RedisServer, free_port
from testkit.shapes import tree_paths

from conftest import SiteFactory
from support import clustersync, node_env, project_with_spiders, start_node, wait_all

SPIDERS = '''
    import scrapy

    from example.spiders.site import SiteSpider


    class TasksSpider(SiteSpider):
        name = "tasks"

        async def start(self):
            base = self.start_url.rsplit("/page/", 1)[0]
            yield scrapy.Request(f"{base}/tree/0.html", meta={"clustersync_task": "tree"})
            yield scrapy.Request(f"{base}/page/1.html", callback=self.parse_broken,
                                 meta={"clustersync_task": "broken"})

        def parse(self, response):
            for href in response.css("a.child::attr(href)").getall():
                if href.endswith("/tree/0.2.2.2.html"):  # a task of its own
                    yield response.follow(href, meta={"clustersync_task": 7})
                else:
                    yield response.follow(href)

        def parse_broken(self, response):
            base = self.start_url.rsplit("/page/", 1)[0]
            yield response.follow(f"{base}/flaky/2.html", callback=self.parse_leaf)
            yield response.follow(f"{base}/page/3.html", callback=self.parse_leaf)
            yield scrapy.Request(self.settings.get("FAILING_URL"), callback=self.parse_leaf)

        def parse_leaf(self, response):
            yield {"url": response.url}
'''


def test_tasks_end_success_or_failed_with_where_and_why_and_children_inherit(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given two nodes crawling two tasks: a tree, and one with a 500 and an unreachable child
    web = site(10)
    project = project_with_spiders(tmp_path, "tasks", SPIDERS)
    failing_url = f"http://127.0.0.1:{free_port()}/down"
    settings = {"FAILING_URL": failing_url, "RETRY_HTTP_CODES": "503", "RETRY_TIMES": "1",
                "CONCURRENT_REQUESTS": "4"}
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=project, spider="tasks", env=node_env(tmp_path))
             for name in ("node1", "node2")]
    # when the crawl ends
    wait_all(nodes, timeout_s=60)
    client = redis_server.client()
    # then the tree task succeeded with every page of its tree but the one of task 7
    answer = clustersync(redis_server.url, "task", "tasks", "tree", "--json")
    code, out = answer.returncode, answer.output
    assert code == 0, out
    tree = json.loads(out)
    assert (tree["state"], tree["requests"], tree["done"], tree["failed"], tree["open"]) == (
        "success", len(tree_paths()) - 1, len(tree_paths()) - 1, 0, 0)
    seven = json.loads(clustersync(redis_server.url, "task", "tasks", "7", "--json").stdout)
    assert (seven["state"], seven["requests"]) == ("success", 1)
    # and the broken task failed: its page, one child and the first try of the unreachable one
    # done (its retry is a request of the task too), two failed; the first failure with its
    # node, HTTP status and error
    broken = json.loads(clustersync(redis_server.url, "task", "tasks", "broken", "--json").stdout)
    assert (broken["state"], broken["requests"], broken["done"], broken["failed"]) == (
        "failed", 5, 5, 2)
    failure = broken["failure"]
    assert failure["node"] in {as_text(n) for n in client.hkeys("clustersync:{tasks}:node_info")}
    assert failure["at_ms"] <= broken["ended_ms"]
    # and the failed list has both failures, with their reason and attempts
    answer = clustersync(redis_server.url, "failed", "tasks", "--json")
    code, out = answer.returncode, answer.output
    assert code == 0, out
    by_url = {each["url"]: each for each in json.loads(out)}
    flaky = by_url[f"{web.url}/flaky/2.html"]
    assert (flaky["status"], flaky["error"], flaky["attempts"], flaky["task"]) == (
        500, "HTTP 500", 1, "broken")
    down = by_url[failing_url]
    assert down["status"] is None
    assert "ConnectionRefusedError: Connection was refused" in down["error"]
    assert (down["attempts"], down["task"], down["errback"]) == (2, "broken", False)
    assert failure["url"] in by_url
    print(f"\nbroken task: {broken}\nfailed: {sorted(by_url)}")
    # (what the crawl cost: tasks ride in the flush and lease calls; no call of their own)
    stats = client.info("commandstats")
    scripts = sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha",
                                                                   "cmdstat_eval"))
    done = int(client.hget("clustersync:{tasks}:stats", "acked") or 1)
    print(f"{scripts} script calls for {done} requests done ({scripts / done:.2f} per request, "
          "joins and heartbeats included)")
    # and `tasks --state failed` lists the broken task only; an unknown task or job is an error
    listed = json.loads(
        clustersync(redis_server.url, "tasks", "tasks", "--state", "failed", "--json").stdout)
    assert [each["task"] for each in listed] == ["broken"]
    answer = clustersync(redis_server.url, "task", "tasks", "nope")
    code, out = answer.returncode, answer.output
    assert code == 1 and "has no task 'nope'" in out
    assert clustersync(redis_server.url, "tasks", "no-such-job").returncode == 3
    assert clustersync(redis_server.url, "task", "no-such-job", "tree").returncode == 3
