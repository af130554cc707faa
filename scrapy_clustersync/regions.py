"""Regions: where a node runs (``CLUSTERSYNC_REGION``) and the sites pinned to one.

A node of region R is leased the requests of the sites pinned to R and of the sites pinned to
no region first; the sites pinned to another region only when it has nothing else to do
(store/lua/frontier.lua). ``clustersync regions`` pins sites (store/lua/regions.lua).
"""

from __future__ import annotations

import re

from .config import ConfigError

#: a region's name: what a data centre or zone is called (eu-west-1, dc2, fra)
REGION = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
REGION_RE = re.compile(rf"^{REGION}$")


def validate_region(name: object, given_as: str = "CLUSTERSYNC_REGION") -> str:
    """``name`` if it can name a region ("" for none); ConfigError saying what can, else."""
    text = "" if name is None else str(name)
    if text and not REGION_RE.match(text):
        raise ConfigError(
            f"{given_as} {text!r} cannot name a region: use letters, digits and _ . - (at "
            "most 64, starting with a letter or digit), e.g. eu-west-1")
    return text
