"""How a node stops for a clustersync reason: one ERROR line, a close reason, a non-zero exit.

A node that cannot run (Redis unreachable or refusing it, a finished job, a bad setting) must
not raise from ``Scheduler.open``: Scrapy then closes a spider whose scraper never opened, and
logs a second traceback. It is stopped the way Scrapy lets a ``spider_opened`` handler stop a
crawl instead: the handler raises ``CloseSpider(reason)`` once everything is open, and the
spider closes at once with that reason (``stop_when_opened``).

Every close reason that starts with ``clustersync_`` is a failure of the node: the process
exits non-zero (``extensions.exitcode.ExitCode``); ``finished`` and every reason of Scrapy or
of the project keep Scrapy's exit code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import CloseSpider

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

#: the prefix of every close reason that says the node failed (exit code non-zero)
FAILURE_PREFIX = "clustersync_"
REDIS_UNREACHABLE = "clustersync_redis_unreachable"
REDIS_AUTH_REFUSED = "clustersync_redis_auth_refused"
JOB_FINISHED = "clustersync_job_finished"
BAD_SETTING = "clustersync_bad_setting"
#: the job's stored state is of a kind this version does not read (``clustersync purge`` it)
JOB_UNREADABLE = "clustersync_job_unreadable"
#: the job is split into another number of partitions than this node crawls
JOB_PARTITIONS_DIFFER = "clustersync_partitions_differ"
#: ``clustersync stop JOB``: the node handed back what it had not started and closed
JOB_STOPPED = "clustersync_stopped"


def is_failure(reason: str | None) -> bool:
    """True if a spider closed with ``reason`` means the node failed (see the module doc)."""
    return bool(reason) and str(reason).startswith(FAILURE_PREFIX)


class StopWhenOpened:
    """Closes the spider with ``reason`` as soon as it is open (see the module doc).

    The caller keeps this object: the crawler's signals hold their receivers weakly.
    """

    def __init__(self, crawler: Crawler, reason: str) -> None:
        self.reason = reason
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)

    def spider_opened(self) -> None:
        raise CloseSpider(self.reason)


class RefusedScheduler:
    """The scheduler of a node whose ``CLUSTERSYNC_*`` settings cannot work (the add-on logged
    why): it holds nothing and closes the spider with ``clustersync_bad_setting`` once open."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._stop: StopWhenOpened | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def open(self, spider: Spider) -> None:
        self._stop = StopWhenOpened(self.crawler, BAD_SETTING)

    def close(self, reason: str) -> None:
        """Nothing to hand back: the node never joined."""

    def has_pending_requests(self) -> bool:
        return False

    def enqueue_request(self, request: Request) -> bool:
        """Refuses every request (the spider is closing)."""
        return False

    def next_request(self) -> Request | None:
        return None

    def __len__(self) -> int:
        return 0
