"""The dupefilter's public path: ``scrapy_clustersync.dupefilter.ClusterDupeFilter``."""

from __future__ import annotations

from .plugin.cluster_dupefilter import ClusterDupeFilter

__all__ = ["ClusterDupeFilter"]
