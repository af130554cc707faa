"""The job's shared settings in Redis: read them (``SharedSettingsStore.read``, also in a round
trip), change them as one new version (``change``, settings.lua), their history and the keys the
spider declares.

Keys (store/keys.py): the ``settings`` hash (name -> canonical JSON of the value), the meta
field ``settings_version`` (absent = 0), the ``settings_log`` list (one JSON record per changed
key, oldest first, bounded) and the ``live_keys`` hash (spider-declared key -> type name,
written by the nodes). Values are checked by scrapy_clustersync/live_settings.py before they are
written; this module stores and reads them as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import redis

from ..live_settings import UNSET, Unset, canonical_json
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text, json_objects
from .round_trip import Answer, RoundTrip
from .script_base import JobScript, new_call_id

__all__ = ["UNSET", "SettingsChange", "SettingsRecord", "SharedSettings", "SharedSettingsStore"]

#: CLUSTERSYNC_SETTINGS_HISTORY's default: history records a job keeps
HISTORY_KEEP = 1000
VERSION_FIELD = "settings_version"

#: a history record: {"version", "ms", "who", "key", "old", "new"} (old/new: values or None)
SettingsRecord = dict[str, Any]


def _frozen(values: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class SharedSettings:
    """The shared settings of one version: ``values`` decoded from their JSON; ``unreadable``
    holds the raw text of values that are no JSON (written by another program), left out of
    ``values``."""

    version: int = 0
    values: Mapping[str, Any] = field(default_factory=_frozen)
    unreadable: Mapping[str, str] = field(default_factory=_frozen)

    @classmethod
    def parse(cls, version: Any, fields: Mapping[Any, Any]) -> SharedSettings:
        """From ``settings_version`` and the ``settings`` hash as read."""
        values, unreadable = {}, {}
        for name, raw in fields.items():
            try:
                values[as_text(name)] = json.loads(raw)
            except ValueError:
                unreadable[as_text(name)] = as_text(raw)
        return cls(_version(version), _frozen(values), _frozen(unreadable))


def _version(raw: Any) -> int:
    try:
        return int(as_text(raw)) if raw else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class SettingsChange:
    """What ``change`` did: ``verdict`` is "changed" (``version`` is the new one, ``changed``
    the keys whose value changed, ``ms`` its server time), "same" (every value was so already),
    "stale" (the version expected was not ``version``, the current one) or "absent" (no such
    job). Only "changed" changed anything."""

    verdict: str
    version: int
    changed: tuple[str, ...] = ()
    ms: int = 0


class SettingsScript(JobScript):
    """settings.lua: ``run`` applies a set of changes as one version and publishes it."""

    FILE = "settings"
    KEYS = ("meta", "settings", "settings_log")
    ARGV = ("expect_version", "call_id", "who", "history_keep", "channel")
    ARGV_TAIL = "change"

    def call(self, changes: Mapping[str, Any], who: str, expect_version: int | None,
             call_id: str, history_keep: int) -> tuple[list[str], list[Any]]:
        k = self.keys
        args: list[Any] = ["" if expect_version is None else str(expect_version), call_id, who,
                           history_keep, k.control_channel]
        for name, value in changes.items():
            args += [name, "" if isinstance(value, Unset) else canonical_json(value)]
        return [k.meta, k.settings, k.settings_log], args

    def run(self, changes: Mapping[str, Any], who: str, expect_version: int | None,
            call_id: str, history_keep: int) -> SettingsChange:
        verdict, version, ms, *changed = self._call(
            *self.call(changes, who, expect_version, call_id, history_keep))
        return SettingsChange(as_text(verdict), int(as_text(version)),
                              tuple(as_text(name) for name in changed), int(as_text(ms) or 0))


class SharedSettingsStore:
    """The shared settings of one job (see the module doc). Errors are the store's own."""

    def __init__(self, client: redis.Redis, keys: JobKeys,
                 history_keep: int = HISTORY_KEEP) -> None:
        """``history_keep``: the newest history records a change leaves (at least 1)."""
        self.client = client
        self.keys = keys
        self.history_keep = max(1, history_keep)
        self._script = SettingsScript(client, keys)

    def read(self) -> SharedSettings:
        """The current version and its values, as one snapshot (MULTI: one round trip)."""
        with translate_errors(self.client):
            pipe = self.client.pipeline(transaction=True)
            pipe.hget(self.keys.meta, VERSION_FIELD)
            pipe.hgetall(self.keys.settings)
            version, fields = pipe.execute()
        return SharedSettings.parse(version, fields)

    def read_in(self, trip: RoundTrip) -> Answer[SharedSettings]:
        """``read`` in ``trip`` (round_trip.py), as two reads of the round trip's pipeline."""
        # Not a transaction: a change may run between the two reads. The version is read
        # first, so the values are never older than the version reported; a node that got
        # newer values than its version reads them again when it next finds the version moved.
        version: Answer[Any] = trip.add(lambda pipe: pipe.hget(self.keys.meta, VERSION_FIELD),
                                        Answer(self.client, lambda reply: reply, lambda: None))
        return trip.add(lambda pipe: pipe.hgetall(self.keys.settings),
                        Answer(self.client,
                               lambda reply: SharedSettings.parse(version.result(), reply),
                               self.read))

    def version(self) -> int:
        """The current version alone (one HGET): what a node compares with the one it applies."""
        with translate_errors(self.client):
            return _version(self.client.hget(self.keys.meta, VERSION_FIELD))

    def change(self, changes: Mapping[str, Any], who: str,
               expect_version: int | None = None, call_id: str | None = None) -> SettingsChange:
        """Apply ``changes`` (key -> new value, or UNSET to remove it) all or nothing, in one
        script call, as one new version with a history record per changed key, then publish
        "settings <version>" on the job's control channel (best effort). A key set to the value
        it holds changes nothing. ``expect_version``: refuse ("stale") unless it is the current
        version. ``call_id``: the call's id (new unless given); the same id again changes
        nothing more and answers what the first call did."""
        if not changes:
            return SettingsChange("same", self.version())
        return self._script.run(changes, who, expect_version, call_id or new_call_id(),
                                self.history_keep)

    def history(self, limit: int) -> list[SettingsRecord]:
        """The newest ``limit`` history records, oldest first; a record that is no JSON object
        (another program wrote it) is left out."""
        with translate_errors(self.client):
            raw = self.client.lrange(self.keys.settings_log, -max(1, limit), -1)
        return json_objects(raw)

    def names(self) -> set[str]:
        """The keys the job shares now (one HKEYS)."""
        with translate_errors(self.client):
            return {as_text(name) for name in self.client.hkeys(self.keys.settings)}

    def declare_keys(self, declared: Mapping[str, str]) -> None:
        """Record the keys this node's spider declares live (key -> type name), so that
        ``clustersync config set`` accepts them (one HSET; nothing when there are none)."""
        mapping: dict[Any, Any] = dict(declared)
        if mapping:
            with translate_errors(self.client):
                self.client.hset(self.keys.live_keys, mapping=mapping)

    def declared_keys(self) -> dict[str, str]:
        """The keys the spider declares live, with their type names, as the nodes wrote them."""
        with translate_errors(self.client):
            raw = self.client.hgetall(self.keys.live_keys)
        return {as_text(name): as_text(kind) for name, kind in raw.items()}
