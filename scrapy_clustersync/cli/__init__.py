"""``clustersync``: see and steer the jobs of a cluster from any machine that reaches Redis."""

from __future__ import annotations

from .app import main

__all__ = ["main"]
