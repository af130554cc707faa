"""Settings shared by every variant; a variant module adds only its scheduler lines.

The run passes ``USER_AGENT`` (one per run, so the site counts each run apart),
``BENCH_STATS_PATH`` and the Redis URL with ``-s``.
"""

BOT_NAME = "benchproj"
# the example project's spider, so every variant crawls with the code users start from
SPIDER_MODULES = ["example.spiders"]

CONCURRENT_REQUESTS = 16
LOG_LEVEL = "INFO"
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False  # Scrapy 2.19's HTTP control server: off, like telnet
AUTOTHROTTLE_ENABLED = False
HTTPCACHE_ENABLED = False
ITEM_PIPELINES: dict[str, int] = {}
EXTENSIONS = {"benchproj.extensions.StatsToJson": 0, "benchproj.extensions.ThreadNames": 0}
LOG_FORMAT = "%(asctime)s.%(msecs)03d [%(name)s] %(levelname)s: %(message)s"  # ms, for timing
