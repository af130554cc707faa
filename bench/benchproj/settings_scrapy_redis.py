"""scrapy-redis 0.9.1: its Scheduler and RFPDupeFilter on the run's own redis-server.

A plain ``scrapy.Spider`` with this scheduler closes as soon as its node looks idle, which with
two nodes means at start-up (before the other node has seeded the queue) or mid-crawl; a
node that closes with ``SCHEDULER_PERSIST = False`` deletes the shared queue and fingerprints.
``IdleClose`` keeps a node open until it has been idle for ``BENCH_IDLE_CLOSE_AFTER`` seconds,
like RedisSpider's ``MAX_IDLE_TIME_BEFORE_CLOSE``.
"""

from benchproj.settings import *  # noqa: F403
from benchproj.settings import EXTENSIONS

SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
SCHEDULER_PERSIST = False
REDIS_URL = "redis://127.0.0.1:1/0"  # replaced with -s by the run: never the default 6379
EXTENSIONS = {**EXTENSIONS, "benchproj.extensions.IdleClose": 0}
BENCH_IDLE_CLOSE_AFTER = 1.0
