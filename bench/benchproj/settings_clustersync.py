"""scrapy-clustersync: its one ADDONS line, on the run's own redis-server."""

from benchproj.settings import *  # noqa: F403

ADDONS = {"scrapy_clustersync.Addon": 100}
CLUSTERSYNC_REDIS_URL = "redis://127.0.0.1:1/0"  # replaced with -s by the run
CLUSTERSYNC_IDLE_CLOSE_AFTER = 1.0
# the default, said here: every item goes to the job's results stream, as vanilla x1 +feed
# writes it to a JSON lines feed
CLUSTERSYNC_RESULTS = True
