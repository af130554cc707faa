"""The commands serve runs for a node over HTTP (http_client.py sends them, api/node_routes.py
receives them): checked, then
run in order in one Redis pipeline, each reply or error given back in its place.

A node's commands are the job's own: the scripts a node runs (by their text, EVAL, or their
SHA, EVALSHA), and reads of the job's keys a node makes (its control state, shared settings,
its call record). Every key a command names must be one of the job's (its hash tag), so that a
worker token of one job's node writes nothing of another job, and no script that a node never
runs (restart, shared settings changes) can be reached this way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import redis

from .bloom_scripts import BloomPrepareScript, DedupMigrateScript
from .closespider_script import CloseSpiderScript
from .cluster_client import is_cluster
from .control_state import ControlScript
from .errors import StoreError, StoreUnavailable, translate_errors
from .flush_script import FlushScript
from .heartbeat_script import HeartbeatScript
from .join_scripts import JoinScript
from .keys import JobKeys
from .lease_script import LeaseScript
from .outage_replies import drop_connections, not_serving
from .partition_count import PartitionsScript
from .script_base import JobScript, load_lua
from .site_scripts import SiteSlowDownScript, SiteTurnsScript

#: the scripts a node runs (JobStore and what the node's thread calls)
NODE_SCRIPTS: tuple[type[JobScript], ...] = (
    FlushScript, LeaseScript, HeartbeatScript, JoinScript, ControlScript, BloomPrepareScript,
    DedupMigrateScript, CloseSpiderScript, SiteTurnsScript, SiteSlowDownScript, PartitionsScript)
#: reads of one key (the first argument) a node makes
READS = frozenset({"HGET", "HMGET", "HGETALL", "HKEYS", "LRANGE", "XLEN"})
#: commands sent with no key
NO_KEY = frozenset({"PING", "TIME"})
#: commands in one request at most (a round trip of a node holds a handful)
MAX_CALLS = 256


class Refused(ValueError):
    """A command a node may not send (the request is answered 403, nothing of it run)."""


@lru_cache(maxsize=1)
def node_script_shas() -> frozenset[str]:
    """The SHA1 of every script a node runs, as Redis names them."""
    return frozenset(hashlib.sha1(load_lua(kind.FILE, *kind.HELPERS).encode()).hexdigest()
                     for kind in NODE_SCRIPTS)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def check_call(call: Sequence[Any], job: str, node_id: str) -> list[Any]:
    """``call`` as it will be run, or Refused saying why it may not be."""
    if not call:
        raise Refused("an empty command")
    name = _text(call[0]).upper()
    args = list(call[1:])
    check = _CHECKS.get(name)
    if check is None:
        if name not in READS and name not in NO_KEY:
            raise Refused(f"{name} is not a command a node sends")
        if name in READS and (not args or not _text(args[0]).startswith(_prefix(job))):
            raise Refused(f"{name} of a key that is not job {job!r}'s")
    else:
        check(name, args, job, node_id)
    return [name, *args]


def _prefix(job: str) -> str:
    return JobKeys(job)._key("")


def _check_expire(name: str, args: list[Any], job: str, node_id: str) -> None:
    if len(args) != 2 or _text(args[0]) != JobKeys(job).last_call(node_id):
        raise Refused("PEXPIRE of another key than the node's call record")


def _check_load(name: str, args: list[Any], job: str, node_id: str) -> None:
    if len(args) != 2 or _text(args[0]).upper() != "LOAD":
        raise Refused("SCRIPT other than SCRIPT LOAD")
    if _sha_of(args[1]) not in node_script_shas():
        raise Refused("SCRIPT LOAD of a script that is no node's")


def _sha_of(text: Any) -> str:
    return hashlib.sha1(text if isinstance(text, bytes) else str(text).encode()).hexdigest()


def _check_script(name: str, args: list[Any], job: str, node_id: str) -> None:
    prefix = _prefix(job)
    if len(args) < 2:
        raise Refused(f"{name} without its script and key count")
    sha = _sha_of(args[0]) if name == "EVAL" else _text(args[0])
    if sha not in node_script_shas():
        raise Refused(f"{name} of a script that is no node's")
    try:
        count = int(args[1])
    except (TypeError, ValueError):
        raise Refused(f"{name} with a key count that is no number") from None
    keys = args[2:2 + count]
    if count < 0 or len(keys) < count or any(not _text(k).startswith(prefix) for k in keys):
        raise Refused(f"{name} of a key that is not the job's")


def _check_declare(name: str, args: list[Any], job: str, node_id: str) -> None:
    """The keys a node's spider declares live (SharedSettingsStore.declare_keys)."""
    if len(args) < 3 or len(args) % 2 == 0 or _text(args[0]) != JobKeys(job).live_keys:
        raise Refused("HSET of another key than the job's declared live keys")


_CHECKS: dict[str, Callable[[str, list[Any], str, str], None]] = {
    "EVAL": _check_script, "EVALSHA": _check_script, "SCRIPT": _check_load,
    "PEXPIRE": _check_expire, "HSET": _check_declare}


def _loaded_on_every_primary(client: redis.Redis, calls: list[list[Any]]) -> dict[int, Any]:
    """A cluster client's pipeline cannot send SCRIPT LOAD (it has no key): each is sent on
    its own, to every primary, before the pipeline (loading a script early changes nothing);
    its reply (the SHA, or the error) by the call's position."""
    replies: dict[int, Any] = {}
    for i, call in enumerate(calls):
        if _text(call[0]).upper() == "SCRIPT":
            try:
                with translate_errors(client):
                    replies[i] = client.script_load(call[2])
            except StoreUnavailable:
                raise
            except StoreError as exc:
                replies[i] = redis.ResponseError(str(exc))
    return replies


def run_calls(client: redis.Redis, calls: list[list[Any]],
              transaction: bool = False) -> list[list[Any]]:
    """Each call's reply, in order: ``[0, value]``, or ``[1, error class, message]`` for an
    error Redis answered (redis-py's class name, which the node raises again). Raises
    redis.ConnectionError / TimeoutError if Redis cannot be reached; a reply saying Redis
    cannot serve writes now drops the client's connections (the next call reconnects)."""
    loaded = _loaded_on_every_primary(client, calls) if is_cluster(client) else {}
    pipe = client.pipeline(transaction=transaction)
    for i, call in enumerate(calls):
        if i not in loaded:
            pipe.execute_command(*call)  # type: ignore[no-untyped-call, unused-ignore]
    with translate_errors(client):  # (only a failure of the whole pipeline raises)
        sent = iter(pipe.execute(raise_on_error=False) if len(loaded) < len(calls) else [])
    replies = [loaded[i] if i in loaded else next(sent) for i in range(len(calls))]
    if any(isinstance(reply, redis.RedisError) and not_serving(reply) for reply in replies):
        drop_connections(client)
    return [[1, type(reply).__name__, str(reply)] if isinstance(reply, Exception)
            else [0, reply] for reply in replies]
