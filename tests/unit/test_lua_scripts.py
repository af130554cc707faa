"""The Lua scripts' headers, their bindings and the Python classes that call them agree.

Every script of store/lua/ lists its KEYS and ARGV in its header, binds each to a named local
at its top (``local meta_key = KEYS[1]``, ``local epoch = ARGV[1]``, ``local chunk_from = 16``
for a variable tail), and uses only the names after that; its class (script_base.JobScript)
names the same entries in the same order and passes exactly that many. No Redis: the calls are
built, not sent.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any, cast

import pytest
import redis

from scrapy_clustersync.config import DedupSettings
from scrapy_clustersync.store.bloom_scripts import BloomPrepareScript, DedupMigrateScript
from scrapy_clustersync.store.check_script import CheckScript
from scrapy_clustersync.store.closespider_script import (
    CloseLimits,
    CloseSpiderScript,
    SpiderCounts,
)
from scrapy_clustersync.store.control_state import ControlScript
from scrapy_clustersync.store.dead_requeue import RequeueScript
from scrapy_clustersync.store.dedup import LayersDescribed
from scrapy_clustersync.store.flush_script import FlushDedup, FlushScript
from scrapy_clustersync.store.heartbeat_script import Beat, HeartbeatScript
from scrapy_clustersync.store.join_scripts import (
    DedupRecord,
    JoinRequest,
    JoinScript,
    RestartScript,
)
from scrapy_clustersync.store.keys import JobKeys
from scrapy_clustersync.store.lease_script import LeaseScript
from scrapy_clustersync.store.partition_count import PartitionsScript
from scrapy_clustersync.store.primary_note import PrimaryScript
from scrapy_clustersync.store.region_pins import RegionsScript
from scrapy_clustersync.store.results_store import ResultsAckScript
from scrapy_clustersync.store.script_base import JobScript
from scrapy_clustersync.store.shared_settings import UNSET, SettingsScript
from scrapy_clustersync.store.site_scripts import SiteSlowDownScript, SiteTurnsScript, TurnsAsk
from scrapy_clustersync.store.write_ops import Ack, Push

HELPERS = {"prelude", "bloom", "tasks", "frontier", "lease_index"}
KEYS = JobKeys("job")
NODE = "n1"
HEADER = re.compile(r"^-- (KEYS|ARGV)\[(\d+)(\.\.)?\]\s+(\w+)", re.M)
LITERAL_INDEX = re.compile(r"\b(KEYS|ARGV)\[\d")


class _Client:
    """What a script class needs of a client to be built: register_script."""

    def register_script(self, text: str) -> object:
        return object()


CLIENT = cast(redis.Redis, _Client())
TWO_LAYERS = LayersDescribed(2, ("c0", "c1", "c2"), tuple(range(10)))
RECORD = DedupRecord(("seen", "bloom", "chunk"), ("layers", "1", "count0", "5"))

Call = tuple[JobScript, tuple[list[str], list[Any]], int, int]


def sample_calls() -> list[Call]:
    """Each script class, built, with a sample call and how many tail KEYS and ARGV it passes."""
    flush = FlushScript(CLIENT, KEYS, NODE, 5)
    lease = LeaseScript(CLIENT, KEYS, NODE)
    heartbeat = HeartbeatScript(CLIENT, KEYS, NODE)
    join, restart = JoinScript(CLIENT, KEYS), RestartScript(CLIENT, KEYS)
    control, check = ControlScript(CLIENT, KEYS), CheckScript(CLIENT, KEYS)
    prepare, migrate = BloomPrepareScript(CLIENT, KEYS), DedupMigrateScript(CLIENT, KEYS)
    requeue = RequeueScript(CLIENT, KEYS)
    settings = SettingsScript(CLIENT, KEYS)
    turns, slow_down = SiteTurnsScript(CLIENT, KEYS, NODE), SiteSlowDownScript(CLIENT, KEYS)
    ask = TurnsAsk("a.com", 3, 0.5, 0.5, 7, 0.2, 2, 60.0, 1, ("n1:1", "n1:2"))
    join_ask = JoinRequest(NODE, "e", 1, True, "exact", DedupSettings(), "forget-seen")
    closespider = CloseSpiderScript(CLIENT, KEYS, NODE)
    results_ack = ResultsAckScript(CLIENT, KEYS)
    primary = PrimaryScript(CLIENT, KEYS)
    regions = RegionsScript(CLIENT, KEYS)
    partitions = PartitionsScript(CLIENT, KEYS)
    return [
        (flush, flush.call("e", "c", 0, FlushDedup("set-then-bloom", 9, TWO_LAYERS),
                           [Push(b"f" * 20, 0, b"r"), Ack("id")]), 3, 10 + 1),
        (lease, lease.call("e", "c", 10, 1000, 0), 0, 0),
        (heartbeat, heartbeat.call("e", Beat(1, 2, "{}", 0, 3, 4, 5, 6, ["l1", "l2"]), 0), 0, 2),
        (join, join.call(join_ask, RECORD), 3, 4),
        (restart, restart.call(True, RECORD), 3, 4),
        (control, control.call("pause"), 0, 0),
        (check, check.call([("k", "id", ""), ("k", "id2", "1")], True), 0, 6),
        (prepare, prepare.call("e", 1, 2, 64, 8), 0, 0),
        (migrate, migrate.call("e", 200, "set-then-blocked-bloom", TWO_LAYERS), 3, 10),
        (requeue, requeue.call([(b"l\n", "id", "0"), (b"m\n", "id2", "-1")]), 0, 6),
        (settings, settings.call({"DOWNLOAD_DELAY": 0.5, "USER_AGENT": UNSET}, "me@host", 3,
                                 "c", 10), 0, 4),
        (turns, turns.call(ask), 0, 2),
        (slow_down, slow_down.call("a.com", 3.0, 0.5), 0, 0),
        (closespider, closespider.call("c", SpiderCounts(1, 2, 3), CloseLimits(50), 4, 0), 0, 0),
        (results_ack, results_ack.call("g", ["1-0", "1-1"]), 0, 2),
        (primary, primary.call("10.0.0.5:6379"), 0, 0),
        (regions, regions.call({"a.com": "eu", "b.com": ""}), 0, 4),
        (partitions, partitions.call(3), 0, 0),
    ]


CALLS = sample_calls()


def lua(name: str) -> str:
    return resources.files("scrapy_clustersync.store").joinpath("lua").joinpath(
        f"{name}.lua").read_text()


def header(text: str, kind: str) -> tuple[list[tuple[int, str]], tuple[int, str] | None]:
    """The header's fixed entries of ``kind`` (index, name) and its tail entry, if any."""
    fixed, tail = [], None
    for found_kind, index, dots, name in HEADER.findall(text):
        if found_kind == kind:
            if dots:
                tail = (int(index), name)
            else:
                fixed.append((int(index), name))
    return fixed, tail


def test_every_script_has_a_class_and_every_class_a_script() -> None:
    files = {name.removesuffix(".lua") for name in
             (entry.name for entry in resources.files("scrapy_clustersync.store")
              .joinpath("lua").iterdir()) if name.endswith(".lua")}
    assert {type(script).FILE for script, *_ in CALLS} == files - HELPERS


@pytest.mark.parametrize("kind", ["KEYS", "ARGV"])
@pytest.mark.parametrize("script", [each[0] for each in CALLS], ids=lambda s: type(s).FILE)
def test_the_header_lists_what_the_class_names_in_order(script: JobScript, kind: str) -> None:
    fixed, tail = header(lua(script.FILE), kind)
    names = script.KEYS if kind == "KEYS" else script.ARGV
    tail_name = script.KEYS_TAIL if kind == "KEYS" else script.ARGV_TAIL
    assert fixed == list(enumerate(names, start=1))
    assert tail == (None if tail_name is None else (len(names) + 1, tail_name))


@pytest.mark.parametrize("script", [each[0] for each in CALLS], ids=lambda s: type(s).FILE)
def test_the_script_binds_every_header_entry_to_its_name_and_uses_only_names(
    script: JobScript,
) -> None:
    text = lua(script.FILE)
    code = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    bindings = []
    for kind in ("KEYS", "ARGV"):
        fixed, tail = header(text, kind)
        for index, name in fixed:
            local = f"{name}_key" if kind == "KEYS" else name
            bindings.append(re.compile(
                rf"^local {local} = (tonumber\()?{kind}\[{index}\]\)?$"))
        if tail is not None:
            bindings.append(re.compile(rf"^local {tail[1]}_from = {tail[0]}$"))
    for binding in bindings:
        assert sum(1 for line in code if binding.match(line)) == 1, binding.pattern
    unbound = [line for line in code if LITERAL_INDEX.search(line)
               and not any(binding.match(line) for binding in bindings)]
    assert unbound == []


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_the_helpers_take_keys_and_arguments_as_parameters(helper: str) -> None:
    code = [line for line in lua(helper).splitlines() if not line.lstrip().startswith("--")]
    assert [line for line in code if "KEYS" in line or "ARGV" in line] == []


@pytest.mark.parametrize(("script", "call", "tail_keys", "tail_args"), CALLS,
                         ids=[type(each[0]).FILE for each in CALLS])
def test_the_class_passes_the_keys_its_header_names_and_as_many_arguments(
    script: JobScript, call: tuple[list[str], list[Any]], tail_keys: int, tail_args: int,
) -> None:
    keys, args = call
    named = {"last_call": KEYS.last_call(NODE), "chunk": None, "site": KEYS.site("a.com"),
             "inflight": KEYS.site_inflight("a.com")}
    expected = [named[name] if name in named else getattr(KEYS, name) for name in script.KEYS]
    if script.FILE == "bloom_prepare":  # its one chunk is a fixed key: layer 1, chunk 2
        expected[-1] = KEYS.bloom_chunk(1, 2)
    assert keys[:len(script.KEYS)] == expected
    assert (len(keys), len(args)) == (len(script.KEYS) + tail_keys, len(script.ARGV) + tail_args)
