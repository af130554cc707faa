"""Every ``CLUSTERSYNC_*`` name is checked: a misspelled setting stops the node (or the command)
with the name and the closest known one, instead of being silently ignored.

The known names are the keys of ``config.DEFAULTS``: the one registry of settings. A setting
the package reads anywhere has its entry there (a unit test greps the package for names that do
not), so a new setting is added in one place.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .config import DEFAULTS, ConfigError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

PREFIX = "CLUSTERSYNC_"
#: every setting the package reads
KNOWN_SETTINGS = frozenset(DEFAULTS)
#: how close a known name must be to be offered (difflib's ratio, 0-1)
CLOSE_ENOUGH = 0.6

#: where a setting of this priority came from, for the message (Scrapy's SETTINGS_PRIORITIES)
_SOURCE_OF_PRIORITY = {
    "cmdline": "set with -s",
    "spider": "in the spider's custom_settings",
    "project": "in the project's settings",
    "addon": "set by an add-on",
    "command": "set by the command",
}


def unknown_names(names: Iterable[str]) -> list[str]:
    """The ``CLUSTERSYNC_*`` names among ``names`` that are no known setting, sorted."""
    return sorted({name for name in names
                   if isinstance(name, str) and name.startswith(PREFIX)
                   and name not in KNOWN_SETTINGS})


def closest_setting(name: str) -> str | None:
    """The known setting whose name is closest to ``name``; None if none is close. Names are
    compared without the prefix they all share, which would make any two look close."""
    tails = sorted(known[len(PREFIX):] for known in KNOWN_SETTINGS)
    close = difflib.get_close_matches(name[len(PREFIX):], tails, n=1, cutoff=CLOSE_ENOUGH)
    return PREFIX + close[0] if close else None


def describe_unknown(name: str, source: str = "") -> str:
    """One sentence about the unknown setting ``name`` (``source``: where it was given)."""
    where = f" ({source})" if source else ""
    closest = closest_setting(name)
    hint = f"did you mean {closest}?" if closest else "no known setting has a close name."
    return f"{name}{where} is not a clustersync setting; {hint}"


def check_setting_names(names: Iterable[str],
                        source_of: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError naming every unknown ``CLUSTERSYNC_*`` name among ``names`` and the
    closest known name of each; ``source_of`` says where a name was given (for the message)."""
    unknown = unknown_names(names)
    if not unknown:
        return
    sources = source_of or {}
    described = " ".join(describe_unknown(name, sources.get(name, "")) for name in unknown)
    raise ConfigError(f"{described} The README's settings table lists every setting.")


def check_settings_object(settings: BaseSettings) -> None:
    """Check the names of a Scrapy ``BaseSettings`` (settings.py, ``-s``, custom_settings),
    each named with where it was given; ConfigError as ``check_setting_names``."""
    names = [name for name in settings if isinstance(name, str)]
    sources = {name: _source(settings, name) for name in unknown_names(names)}
    check_setting_names(names, sources)


def _source(settings: BaseSettings, name: str) -> str:
    from scrapy.settings import SETTINGS_PRIORITIES

    priority = settings.getpriority(name)
    for label, value in SETTINGS_PRIORITIES.items():
        if value == priority:
            return _SOURCE_OF_PRIORITY.get(label, "")
    return ""
