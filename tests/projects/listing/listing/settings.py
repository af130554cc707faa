"""A listing site crawler made a cluster node by the two CLUSTERSYNC lines, as in example_project.

``ITEMS_PER_PAGE`` and ``PIPELINE_DELAY`` shape the load; ``LISTING_ITEMS_FILE``, when set, is a
file to which the pipeline appends a line (page URL and position) per item it has processed.
"""

import os

BOT_NAME = "listing"
SPIDER_MODULES = ["listing.spiders"]
NEWSPIDER_MODULE = "listing.spiders"

ADDONS = {"scrapy_clustersync.Addon": 100}
CLUSTERSYNC_REDIS_URL = os.environ.get("CLUSTERSYNC_REDIS_URL", "redis://127.0.0.1:6379/0")

ITEM_PIPELINES = {"listing.pipelines.SlowAsyncPipeline": 300}
ITEMS_PER_PAGE = 120
PIPELINE_DELAY = 0.01
LISTING_ITEMS_FILE = ""

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 16
LOG_LEVEL = "INFO"
TELNETCONSOLE_ENABLED = False
