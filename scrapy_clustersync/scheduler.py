"""The scheduler's public path: ``scrapy_clustersync.scheduler.ClusterScheduler``."""

from __future__ import annotations

from .plugin.cluster_scheduler import ClusterScheduler

__all__ = ["ClusterScheduler"]
