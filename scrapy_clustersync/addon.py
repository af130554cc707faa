"""Addon: the one ``ADDONS`` line that turns a Scrapy project into a cluster node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import ClusterConfig
from .extensions.lifecycle import NodeLifecycle
from .middlewares import ORDER, ClusterSpiderMiddleware

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

SCHEDULER_PATH = "scrapy_clustersync.scheduler.ClusterScheduler"
DUPEFILTER_PATH = "scrapy_clustersync.dupefilter.ClusterDupeFilter"


class Addon:
    """Enable with ``ADDONS = {"scrapy_clustersync.Addon": 100}`` and ``CLUSTERSYNC_REDIS_URL``.

    Settings are set with the "addon" priority, so a user's own settings still win.
    """

    def update_settings(self, settings: BaseSettings) -> None:
        # every setting is checked now, before Scrapy starts anything: a bad value stops the
        # node with one clear error (the job name is checked again once the spider is known)
        ClusterConfig.from_settings(settings, spider_name="spider")
        settings.set("SCHEDULER", SCHEDULER_PATH, priority="addon")
        # a project's own DUPEFILTER_CLASS (priority "project") wins: the scheduler asks it first
        settings.set("DUPEFILTER_CLASS", DUPEFILTER_PATH, priority="addon")
        settings.set_in_component_priority_dict(
            "SPIDER_MIDDLEWARES", ClusterSpiderMiddleware, ORDER
        )
        settings.set_in_component_priority_dict("EXTENSIONS", NodeLifecycle, 0)
