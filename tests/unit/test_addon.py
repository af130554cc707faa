"""The one ``ADDONS`` line: what it switches on, what it leaves to the project, what it refuses."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import cast

import pytest
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import Settings
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object

from scrapy_clustersync import Addon
from scrapy_clustersync.config import ClusterConfig, ConfigError
from scrapy_clustersync.plugin.addon import REFUSED_SCHEDULER_PATH
from scrapy_clustersync.plugin.cluster_dupefilter import ClusterDupeFilter
from scrapy_clustersync.plugin.cluster_scheduler import ClusterScheduler
from scrapy_clustersync.plugin.node_lifecycle import NodeLifecycle
from scrapy_clustersync.plugin.spider_middleware import ORDER, ClusterSpiderMiddleware

REDIS_URL = "redis://127.0.0.1:1/0"  # never contacted: the add-on only reads settings


class ProjectScheduler(ClusterScheduler):
    """A project's own scheduler, built on the cluster's."""


class ProjectSpiderMiddleware:
    """A project's own spider middleware, at a low order of its choosing."""


def settings_after_addon(**project: object) -> Settings:
    """The settings of a project with ``project`` settings, once the add-on updated them."""
    settings = Settings({"CLUSTERSYNC_REDIS_URL": REDIS_URL, **project})  # "project" priority
    Addon().update_settings(settings)
    return settings


def spider_middlewares(settings: Settings) -> MutableMapping[object, int | None]:
    """SPIDER_MIDDLEWARES with its base: component (a class or its import path) -> order.

    A cast: Scrapy types the keys of settings as str, but a component priority dict is keyed by
    classes too (the add-on adds its middleware as a class).
    """
    return cast("MutableMapping[object, int | None]", settings.getwithbase("SPIDER_MIDDLEWARES"))


def test_the_addon_makes_the_cluster_scheduler_the_nodes_scheduler() -> None:
    # given a project with the add-on
    # when the add-on updates its settings
    settings = settings_after_addon()
    # then Scrapy builds the cluster's scheduler
    assert load_object(settings["SCHEDULER"]) is ClusterScheduler


def test_the_cluster_spider_middleware_runs_nearest_the_engine_before_the_projects_own() -> None:
    # given a project whose own spider middleware sits at a very low order
    # when the add-on updates its settings
    settings = settings_after_addon(SPIDER_MIDDLEWARES={ProjectSpiderMiddleware: -1000})
    # then the cluster's middleware is at its ORDER, first of all: what it sees of start()
    # is what the engine gets
    middlewares = spider_middlewares(settings)
    assert middlewares[ClusterSpiderMiddleware] == ORDER
    assert build_component_list(middlewares)[0] is ClusterSpiderMiddleware


def test_the_projects_own_spider_middlewares_keep_their_order() -> None:
    # given a project with its own spider middleware
    # when the add-on updates its settings
    settings = settings_after_addon(SPIDER_MIDDLEWARES={ProjectSpiderMiddleware: -1000})
    # then that middleware is still there, at the project's order
    assert spider_middlewares(settings)[ProjectSpiderMiddleware] == -1000


def test_the_addon_enables_the_node_lifecycle_extension() -> None:
    # given a project with the add-on
    # when the add-on updates its settings
    settings = settings_after_addon()
    # then the extension that keeps an idle node open while the cluster has work is on
    assert NodeLifecycle in build_component_list(settings.getwithbase("EXTENSIONS"))


def test_a_scheduler_the_project_sets_wins_over_the_addons() -> None:
    # given a project that sets its own scheduler
    # when the add-on updates its settings
    settings = settings_after_addon(SCHEDULER=ProjectScheduler)
    # then the project's scheduler stays: the add-on sets its own at the lower "addon" priority
    assert settings["SCHEDULER"] is ProjectScheduler


def test_the_addon_makes_the_clusters_dupefilter_the_dupefilter_class() -> None:
    # given a project with the add-on and no DUPEFILTER_CLASS of its own
    # when the add-on updates its settings
    settings = settings_after_addon()
    # then DUPEFILTER_CLASS names the cluster's filter, not Scrapy's per-process one
    assert load_object(settings["DUPEFILTER_CLASS"]) is ClusterDupeFilter


def test_a_dupefilter_class_the_project_sets_wins_over_the_addons() -> None:
    # given a project that sets DUPEFILTER_CLASS to turn dedup off
    # when the add-on updates its settings
    settings = settings_after_addon(DUPEFILTER_CLASS="scrapy.dupefilters.BaseDupeFilter")
    # then the project's class stays
    assert load_object(settings["DUPEFILTER_CLASS"]) is BaseDupeFilter


def test_a_bad_setting_stops_the_node_naming_it_before_anything_is_switched_on() -> None:
    # given a project with a batch size that is not a number
    settings = Settings({"CLUSTERSYNC_REDIS_URL": REDIS_URL, "CLUSTERSYNC_BATCH_SIZE": "many"})
    # when the add-on updates its settings
    with pytest.raises(ConfigError, match="CLUSTERSYNC_BATCH_SIZE = 'many' is not a whole number"):
        ClusterConfig.from_settings(settings, "spider")
    Addon().update_settings(settings)
    # then the error names the setting, and the node gets a scheduler that stops it at once
    assert settings["SCHEDULER"] == REFUSED_SCHEDULER_PATH


def test_a_project_without_a_redis_url_is_told_how_to_set_one() -> None:
    # given a project with the add-on and no CLUSTERSYNC_REDIS_URL
    # when the add-on updates its settings
    # then the error says what to set, with an example
    with pytest.raises(ConfigError, match='e.g. CLUSTERSYNC_REDIS_URL = "redis://'):
        ClusterConfig.from_settings(Settings(), "spider")
