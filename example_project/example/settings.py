"""An ordinary Scrapy project; the two CLUSTERSYNC lines below make every `scrapy crawl` a node."""

import os

BOT_NAME = "example"
SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

ADDONS = {"scrapy_clustersync.Addon": 100}
CLUSTERSYNC_REDIS_URL = os.environ.get("CLUSTERSYNC_REDIS_URL", "redis://127.0.0.1:6379/0")

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 16
LOG_LEVEL = "INFO"
TELNETCONSOLE_ENABLED = False
