"""A failed request is done as soon as Scrapy is done with it, not when its node goes idle.

Real `scrapy crawl` nodes on a slow site; one request whose download fails (connection
refused, after its retries) with or without an errback (one that yields an item and a request),
under the asyncio and the Twisted select reactor. The test watches Redis: the failed request's
entry must leave the job while the node is still busy with the rest of the site.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testkit.redis_server import RedisServer, free_port

from conftest import SiteFactory
from support import marks, node_env, pages_fetched, project_with_spiders, start_node

SPIDERS = '''
    import time

    import scrapy

    from example.spiders.helpers import mark
    from example.spiders.site import SiteSpider


    class FailingSpider(SiteSpider):
        """The site, and one request that cannot be downloaded (errback if WITH_ERRBACK)."""

        name = "failing"

        def parse(self, response):
            if response.url == self.start_url:  # not a start request: those come last
                errback = self.failed if self.settings.getbool("WITH_ERRBACK") else None
                yield scrapy.Request(self.settings.get("FAILING_URL"), errback=errback)
            yield from super().parse(response)

        def failed(self, failure):
            mark("errback", f"{time.time()}")
            yield {"failed": failure.request.url}
            yield scrapy.Request(self.start_url.replace("/0.html", "/1.html"), dont_filter=True)
'''

REACTORS = {"asyncio": {},
            "select": {"TWISTED_REACTOR": "twisted.internet.selectreactor.SelectReactor"}}


#: whether an entry of the job holds ARGV[1]: the entries hash and the frontier's lists, read
#: in one atomic step (read one after the other, a lease moving the request from its list to
#: the entries hash between the two reads would look like the request gone)
FIND_ENTRY = """
for _, blob in ipairs(redis.call('HVALS', KEYS[1])) do
  if string.find(blob, ARGV[1], 1, true) then return 1 end
end
local cursor = '0'
repeat
  local step = redis.call('SCAN', cursor, 'MATCH', KEYS[2], 'COUNT', 1000)
  cursor = step[1]
  for _, key in ipairs(step[2]) do
    for _, item in ipairs(redis.call('LRANGE', key, 0, -1)) do
      if string.find(item, ARGV[1], 1, true) then return 1 end
    end
  end
until cursor == '0'
return 0
"""


def failing_entry_in_redis(server: RedisServer, marker: bytes) -> bool:
    """Some entry of the job (queued or leased) is the failing request or one of its retries:
    a leased request is in the entries hash, a queued one in its site's list of the frontier
    (a retry waits there between two of its attempts)."""
    found = server.client().eval(FIND_ENTRY, 2, "clustersync:{failing}:entries",
                                 "clustersync:{failing}:f:q:*", marker)
    return bool(found)


@pytest.mark.timing
@pytest.mark.parametrize(("reactor", "errback"), [
    ("asyncio", True), ("select", True), ("asyncio", False),
], ids=["asyncio-errback", "select-errback", "asyncio-no-errback"])
def test_a_failed_request_is_acked_right_after_its_errback_while_the_node_is_still_busy(
    reactor: str, errback: bool, redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a node on a slow site (about 7 s of pages) and a request that fails after 2 retries
    # (retried first, so that it fails early in the crawl)
    web = site(120, delay_s=0.1, links_per_page=2)
    marker = f"127.0.0.1:{free_port()}/nothing-listens".encode()
    project = project_with_spiders(tmp_path, "failing", SPIDERS)
    settings = {"FAILING_URL": "http://" + marker.decode(), "CONCURRENT_REQUESTS": "2",
                "RETRY_TIMES": "2", "RETRY_PRIORITY_ADJUST": "10",
                "WITH_ERRBACK": "1" if errback else "0", "CLUSTERSYNC_LEASE_TIMEOUT": "600",
                **REACTORS[reactor]}
    node = start_node("node", redis_server.url, web.start_url, tmp_path, settings,
                      project_dir=project, spider="failing", env=node_env(tmp_path))
    # when the failing request shows up in Redis, then leaves it
    deadline = time.monotonic() + 40
    while not failing_entry_in_redis(redis_server, marker):
        assert time.monotonic() < deadline, node.log()[-3000:]
        time.sleep(0.02)
    while failing_entry_in_redis(redis_server, marker):
        assert time.monotonic() < deadline, node.log()[-3000:]
        time.sleep(0.02)
    gone_at, fetched = time.time(), pages_fetched(web)
    # then it left Redis while the node still had most of the site to crawl (not at idle)
    print(f"\n{reactor} errback={errback}: the failed request left Redis with {fetched} of "
          f"{web.pages} pages fetched")
    assert fetched < web.pages // 2
    # and it is recorded as failed, in the same write as its ack
    failed = redis_server.client().lrange("clustersync:{failing}:failed", 0, -1)
    [record] = [json.loads(each) for each in failed]
    assert (record["attempts"], record["errback"], record.get("status")) == (3, errback, None)
    assert "ConnectionRefusedError" in record["error"]
    if errback:
        [ran_at] = [float(line) for line in marks(tmp_path, "errback")]
        print(f"  {gone_at - ran_at:.3f} s after its errback ran")
        assert gone_at - ran_at < 2.0  # a flush lingers 0.05 s; this is generous
    node.kill()
