"""The values in force on a node: the job's shared settings over the node's own, but for the
keys given on its command line (``-s``, priority "cmdline"), which always win.

``InForce.of`` computes, for every live key (live_settings.LIVE_SETTINGS and the spider's
declared keys), the value the node uses, and what it refused: a shared value that fails the
check of live_settings.py (another program wrote it) is logged and the key keeps the value it
had (the last good one). Spider declarations (``clustersync_live_settings``) are read here too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from ..live_settings import DECLARED_TYPES, LIVE_SETTINGS, LiveSettingError, check_value
from ..store.shared_settings import SharedSettings

logger = logging.getLogger(__name__)

#: the spider attribute that declares its own live keys: {"KEY": "type name"}
DECLARATION_ATTR = "clustersync_live_settings"
CMDLINE = SETTINGS_PRIORITIES["cmdline"]


def declared_live_keys(spider_cls: type | None) -> dict[str, str]:
    """The spider's declared live keys (key -> type name, one of DECLARED_TYPES); an entry
    that is no such pair, or a key that is a built-in live setting, is logged and left out."""
    raw = getattr(spider_cls, DECLARATION_ATTR, None) or {}
    if not isinstance(raw, Mapping):
        logger.error("clustersync: %s.%s must be a dict of setting names to type names (%s); "
                     "it is ignored", getattr(spider_cls, "__name__", "spider"),
                     DECLARATION_ATTR, ", ".join(DECLARED_TYPES))
        return {}
    declared = {}
    for key, kind in raw.items():
        if not isinstance(key, str) or not key or kind not in DECLARED_TYPES or (
                key in LIVE_SETTINGS):
            logger.error("clustersync: the spider's live setting %r: %r is ignored: a new "
                         "setting name (not one of the built-in live settings) with a type "
                         "among %s is accepted", key, kind, ", ".join(DECLARED_TYPES))
            continue
        declared[key] = kind
    return declared


def overridden_keys(settings: BaseSettings, declared: Mapping[str, str]) -> frozenset[str]:
    """The live keys this node was given on its command line (``-s``): shared values of these
    are not applied."""
    return frozenset(key for key in [*LIVE_SETTINGS, *declared]
                     if (settings.getpriority(key) or 0) >= CMDLINE)


def local_value(settings: BaseSettings, key: str, kind: str) -> Any:
    """``key``'s value in the node's own settings, read as Scrapy's getters read it."""
    if kind in ("float", "int", "bool"):
        getter = {"float": settings.getfloat, "int": settings.getint, "bool": settings.getbool}
        return getter[kind](key)
    if kind == "dict":
        return settings.getdict(key)
    if kind in ("list", "int-list"):
        items = settings.getlist(key)
        return [int(item) for item in items] if kind == "int-list" else items
    raw = settings.get(key)
    if kind == "proxy" and isinstance(raw, str):
        text = raw.strip()
        if text[:1] in ("[", "{"):
            return json.loads(text)
        return settings.getlist(key) if "," in text else (text or None)
    return raw


def local_values(settings: BaseSettings, declared: Mapping[str, str]) -> dict[str, Any]:
    """Every live key's value in the node's own settings."""
    kinds = {**{key: s.kind for key, s in LIVE_SETTINGS.items()}, **declared}
    return {key: local_value(settings, key, kind) for key, kind in kinds.items()}


@dataclass(frozen=True)
class InForce:
    """What a node uses: ``values`` (every live key), ``shared`` (the keys whose value is the
    shared one), ``refused`` (shared values not applied: key -> the error's message)."""

    values: Mapping[str, Any]
    shared: frozenset[str] = frozenset()
    refused: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: SharedSettings, local: Mapping[str, Any], before: Mapping[str, Any],
           declared: Mapping[str, str], overridden: frozenset[str]) -> InForce:
        """The values in force with ``settings`` applied over ``local`` (the node's own),
        ``before`` the values in force until now (a refused key keeps its value there)."""
        values, shared, refused = dict(local), set(), {}
        for key, raw in settings.values.items():
            if key not in values or key in overridden:
                continue  # not a key this node knows (another spider's), or given with -s
            try:
                values[key] = check_value(key, raw, declared)
            except LiveSettingError as exc:
                refused[key] = str(exc)
                values[key] = before.get(key, local[key])
            else:
                shared.add(key)
        for key, text in settings.unreadable.items():
            if key in values and key not in overridden:
                refused[key] = f"{key}: the shared value is no JSON ({text[:80]!r})"
                values[key] = before.get(key, local[key])
        return cls(values, frozenset(shared), refused)

    def changes_from(self, before: InForce | None) -> dict[str, Any]:
        """The ``changed`` of ``settings_changed``: the keys whose value in force moved (a key
        whose shared value went away: None); from nothing, every shared key."""
        if before is None:
            return {key: self.values[key] for key in sorted(self.shared)}
        return {key: (value if key in self.shared else None)
                for key, value in self.values.items() if before.values.get(key) != value}
