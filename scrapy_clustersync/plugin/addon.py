"""Addon: the one ``ADDONS`` line that turns a Scrapy project into a cluster node."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.extensions.closespider import CloseSpider

from ..config import ClusterConfig, ConfigError
from ..setting_names import check_settings_object
from . import download_gate
from .cluster_closespider import ClusterCloseSpider, limits_from, node_mode
from .download_gate import DownloadGate
from .exit_code import ExitCode
from .job_control import JobControl
from .node_lifecycle import NodeLifecycle
from .progress_log import ClusterProgress
from .proxy_rule import ORDER as PROXY_ORDER
from .proxy_rule import ProxyRule, check_proxy_setting
from .result_pipeline import ORDER as RESULTS_ORDER
from .result_pipeline import ResultPipeline
from .settings_applier import SettingsApplier
from .spider_middleware import ORDER, ClusterSpiderMiddleware

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from typing_extensions import Self

logger = logging.getLogger(__name__)

SCHEDULER_PATH = "scrapy_clustersync.scheduler.ClusterScheduler"
DUPEFILTER_PATH = "scrapy_clustersync.dupefilter.ClusterDupeFilter"
REFUSED_SCHEDULER_PATH = "scrapy_clustersync.plugin.stop_reasons.RefusedScheduler"
CLOSESPIDER_PATH = "scrapy.extensions.closespider.CloseSpider"


class Addon:
    """Enable with ``ADDONS = {"scrapy_clustersync.Addon": 100}`` and ``CLUSTERSYNC_REDIS_URL``.

    Settings are set with the "addon" priority, so a user's own settings still win.
    """

    def __init__(self, spider_name: str = "spider") -> None:
        self.spider_name = spider_name

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(getattr(crawler.spidercls, "name", None) or "spider")

    def update_settings(self, settings: BaseSettings) -> None:
        settings.set_in_component_priority_dict("EXTENSIONS", ExitCode, 0)
        # every setting is checked now, before Scrapy starts anything: a bad value stops the
        # node with one clear error and a non-zero exit (stop_reasons.py), without a traceback
        try:
            check_settings_object(settings)
            ClusterConfig.from_settings(settings, spider_name=self.spider_name)
            check_proxy_setting(settings)
            limits_from(settings)
        except (ConfigError, ValueError) as exc:
            logger.error("clustersync: %s The node stops.", exc)
            settings.set("SCHEDULER", REFUSED_SCHEDULER_PATH, priority="addon")
            return
        settings.set("SCHEDULER", SCHEDULER_PATH, priority="addon")
        # a project's own DUPEFILTER_CLASS (priority "project") wins: the scheduler asks it first
        settings.set("DUPEFILTER_CLASS", DUPEFILTER_PATH, priority="addon")
        settings.set_in_component_priority_dict(
            "SPIDER_MIDDLEWARES", ClusterSpiderMiddleware, ORDER
        )
        settings.set_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", DownloadGate, download_gate.ORDER
        )
        if settings.getbool("CLUSTERSYNC_RESULTS", True):
            settings.set_in_component_priority_dict("ITEM_PIPELINES", ResultPipeline,
                                                    RESULTS_ORDER)
        settings.set_in_component_priority_dict("EXTENSIONS", NodeLifecycle, 0)
        settings.set_in_component_priority_dict("EXTENSIONS", ClusterProgress, 0)
        settings.set_in_component_priority_dict("EXTENSIONS", JobControl, 0)
        settings.set_in_component_priority_dict("EXTENSIONS", SettingsApplier, 0)
        settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", ProxyRule, PROXY_ORDER)
        if not node_mode(settings):  # CLOSESPIDER_* count for the cluster (cluster_closespider)
            # off under the one key EXTENSIONS_BASE names it by (its path): a second key for
            # it (the class, another path) would make Scrapy warn at every start
            settings.set_in_component_priority_dict("EXTENSIONS", CloseSpider, None)
            extensions = settings.getdict("EXTENSIONS")
            del extensions[CloseSpider]
            extensions[CLOSESPIDER_PATH] = None
            settings.set("EXTENSIONS", extensions, settings.getpriority("EXTENSIONS") or 0)
            settings.set_in_component_priority_dict("EXTENSIONS", ClusterCloseSpider, 0)
