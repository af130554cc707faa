"""The project's dev and test kit: what the tests, `make demo` and `make bench` run against.

Not part of the installed package (the wheel ships `scrapy_clustersync` only); it is imported
from a checkout, with the repository root on ``sys.path``.

- `testkit.site`: `TestSite`, the local website whose hits show what a cluster fetched,
  served by a thread; `testkit.site_process.SiteProcess` is the same site served by a child
  process.
- `testkit.web`: `Web`, many local sites on their own loopback addresses that link to each
  other (a broad crawl: one heavy site most links point at, and light ones).
- `testkit.redis_server`: `RedisServer` (a throw-away ``redis-server`` child process),
  `EmbeddedRedis` (fakeredis over TCP) and `start_any_redis`.
- `testkit.proxy`: `TcpProxy`, a TCP proxy that adds latency and cuts the network.
- `testkit.nodes`: `start_node`, one ``scrapy crawl`` node as a child process.
"""
