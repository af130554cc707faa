"""The item pipelines of this package: ``ResultPipeline`` writes every item to the job's results
stream (docs/results.md). The add-on installs it; ``CLUSTERSYNC_RESULTS = False`` turns it off."""

from __future__ import annotations

from .plugin.result_pipeline import ResultPipeline

__all__ = ["ResultPipeline"]
