"""Writes that could not reach Redis when a node closed are kept on local disk, not dropped.

The next node of the same job started in the same directory replays them, exactly once:
- Every batch is stored with its call id, and replayed under the node id that wrote it, so a
  batch Redis applied before the node lost its answer is not applied again (the flush script
  returns the stored result), and that node's lease releases pass the owner check.
- The file is rewritten after every batch Redis confirmed, and removed only when all are in.
- A node claims a file by renaming it (atomic), so two nodes started together in one directory
  never both replay it; a claim whose process is gone is taken over.
- A file of another format, one holding a write this version cannot read back
  (store/write_ops.py ``decode_op``), or one written for an earlier incarnation of the job
  (Redis lost the job since) is refused with a clear message and kept aside, never replayed
  wrongly.

Format baseline: ``SPOOL_FORMAT`` 2 is the first format any released version writes, and every
version reads it. Format 1 (a bare msgpack list of ops in ``*.msgpack`` files) was only ever
written by development builds before the first release, so it is not read, and such files are
not looked at. A later format change bumps ``SPOOL_FORMAT`` and keeps reading this one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import psutil

from ..store import StoreError
from ..store.errors import BadBatch, RolledBack
from ..store.job_store import new_call_id
from ..store.write_ops import (
    Ack,
    Op,
    OpDecodeError,
    Push,
    PushFlags,
    dead_letter_for,
    decode_op,
)

if TYPE_CHECKING:
    from ..store import JobStore
    from .thread_api import Undelivered

logger = logging.getLogger(__name__)

#: the on-disk form: a msgpack map of SPOOL_FIELDS; "batches" is a list of [call id, ops], each
#: op as its flush-script arguments (store/write_ops.py ``args()``, read back by ``decode_op``)
SPOOL_FORMAT = 2
SPOOL_FIELDS = frozenset({"format", "job", "node", "epoch", "writes_seen", "batches"})
SUFFIX = ".spool"
CLAIM_MARK = ".replaying-"

#: batches of ops, each with the call id it is (or will be) sent under
Batches = list[tuple[str, list[Op]]]


@dataclass
class SpoolFile:
    """What one spool file holds: the writes of node ``node`` for incarnation ``epoch``."""

    job: str
    node: str
    epoch: str
    #: the node's write counter as Redis last confirmed it (checked again on replay)
    writes_seen: int
    batches: Batches

    def to_bytes(self) -> bytes:
        packed: bytes = msgpack.packb({
            "format": SPOOL_FORMAT, "job": self.job, "node": self.node, "epoch": self.epoch,
            "writes_seen": self.writes_seen,
            "batches": [[call_id, [op.args() for op in ops]] for call_id, ops in self.batches],
        }, use_bin_type=True)
        return packed

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> SpoolFile:
        """The file of ``data`` (a format-2 map with every field); OpDecodeError if an op
        is none of this version, ValueError or TypeError if the batches are malformed."""
        batches: Batches = []
        for number, (call_id, ops) in enumerate(data["batches"], 1):
            try:
                batches.append((str(call_id), [decode_op(op) for op in ops]))
            except OpDecodeError as exc:
                raise OpDecodeError(f"batch {number}: {exc}") from None
        return cls(str(data["job"]), str(data["node"]), str(data["epoch"]),
                   int(data["writes_seen"]), batches)


class Spool:
    """The spool files of job ``job`` under ``directory``: saved at close, replayed at open."""

    def __init__(self, directory: str | Path, job: str) -> None:
        self.directory = Path(directory) / job
        self.job = job

    def save(self, node_id: str, epoch: str, undelivered: Undelivered, batch_size: int) -> Path:
        """Keep ``undelivered`` on disk, cut into batches that each have their call id now."""
        batches: Batches = []
        if undelivered.pending is not None:
            call_id, in_doubt = undelivered.pending
            batches.append((call_id, list(in_doubt)))
        batches.extend((new_call_id(), ops) for ops in _cut(list(undelivered.ops), batch_size))
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{node_id.replace(':', '_')}{SUFFIX}"
        _write(path, SpoolFile(self.job, node_id, epoch, undelivered.writes_seen, batches))
        return path

    def replay(self, epoch: str, store_for: Callable[[str, int], JobStore],
               keep_alive: Callable[[], None] = lambda: None) -> int:
        """Send every spooled batch of the job; returns how many writes were sent.

        ``store_for(node_id, writes_seen)`` gives a store acting as the node that wrote a file.
        A file Redis cannot take now (unreachable) is handed back for the next node.
        ``keep_alive()`` is called before each batch: the replaying node is starting up, and
        a long replay must not get it declared dead (node/liveness.py).
        """
        sent = 0
        for path in self._claim_all():
            sent += self._replay_file(path, epoch, store_for, keep_alive)
        return sent

    def _claim_all(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        candidates = sorted(self.directory.glob(f"*{SUFFIX}"), key=_mtime)
        candidates += [p for p in self.directory.glob(f"*{CLAIM_MARK}*") if _claim_is_stale(p)]
        claimed = []
        for path in candidates:
            original = path.name.split(CLAIM_MARK)[0]
            target = path.with_name(f"{original}{CLAIM_MARK}{os.getpid()}")
            try:
                path.rename(target)  # atomic: of two nodes, one wins
            except FileNotFoundError:
                continue
            claimed.append(target)
        return claimed

    def _replay_file(
        self, path: Path, epoch: str, store_for: Callable[[str, int], JobStore],
        keep_alive: Callable[[], None],
    ) -> int:
        spooled = self._readable(path, epoch)
        if spooled is None:
            return 0
        store = store_for(spooled.node, spooled.writes_seen)
        batches = spooled.batches
        sent = 0
        logger.warning("clustersync: sending %d writes spooled in %s",
                       sum(len(ops) for _, ops in batches), path)
        while batches:
            call_id, ops = batches[0]
            try:
                keep_alive()
                store.flush(epoch, ops, call_id)
            except RolledBack:
                _acks_to_releases(batches)  # see SyncWorker._rolled_back
                continue
            except BadBatch as exc:
                _split_or_set_aside(batches, str(exc))
                continue
            except StoreError as exc:
                path.rename(path.with_name(path.name.split(CLAIM_MARK)[0]))
                logger.error("clustersync: spooled writes in %s not sent (%s); the next node "
                             "started here sends them", path, exc)
                return sent
            sent += len(batches.pop(0)[1])
            spooled.writes_seen = store.writes_seen or 0
            if batches:
                _write(path, spooled)  # progress first: a crash now replays no batch twice
        path.unlink()
        _retire(store)
        return sent

    def _readable(self, path: Path, epoch: str) -> SpoolFile | None:
        """The file's content if this node may replay it; else set it aside and say why."""
        try:
            data = msgpack.unpackb(path.read_bytes(), raw=False)
        except Exception as exc:
            self._set_aside(path, "unreadable", f"it cannot be read ({exc})")
            return None
        if not isinstance(data, dict) or data.get("format") != SPOOL_FORMAT:
            found = data.get("format") if isinstance(data, dict) else "unknown (not a map)"
            self._set_aside(
                path, "unknown", f"it has spool format {found!r}, this version reads format "
                f"{SPOOL_FORMAT}: replay it with the version that wrote it")
            return None
        missing = SPOOL_FIELDS - set(data)
        if missing:
            self._set_aside(path, "unreadable", f"it lacks {sorted(missing)}")
            return None
        if data.get("epoch") != epoch:
            self._set_aside(
                path, "stale", "it was written for an earlier incarnation of the job (Redis "
                "lost the job since), so its acks and releases would touch other requests")
            return None
        try:
            return SpoolFile.from_data(data)
        except (ValueError, TypeError) as exc:  # OpDecodeError is a ValueError
            self._set_aside(path, "unreadable", f"its writes cannot be read back ({exc}); "
                            "none of them is sent")
            return None

    def _set_aside(self, path: Path, why: str, reason: str) -> None:
        target = path.with_name(f"{path.name.split(CLAIM_MARK)[0]}.{why}")
        path.rename(target)
        logger.error("clustersync: spool file %s of job %r is not replayed: %s. Kept as %s.",
                     path, self.job, reason, target)


def _cut(ops: list[Op], batch_size: int) -> list[list[Op]]:
    """``ops`` in batches of ``batch_size``, a redirect's or retry's push kept with the ack
    after it (Redis queues the push only if that ack takes effect: write_ops.py
    ``PushFlags.REPLACES``)."""
    batches: list[list[Op]] = []
    start = 0
    while start < len(ops):
        end = min(len(ops), start + batch_size)
        last = ops[end - 1]
        if end < len(ops) and isinstance(last, Push) and last.flags & PushFlags.REPLACES:
            end += 1
        batches.append(ops[start:end])
        start = end
    return batches


def _retire(store: JobStore) -> None:
    """The spooled node's writes are all in: its call record, kept without expiry while its
    spool could come (a missing one reads as a rollback), may expire now."""
    try:
        store.retire_calls()
    except StoreError as exc:  # it stays until `clustersync purge`: a few hundred bytes
        logger.debug("clustersync: the call record of node %s kept (%s)", store.node_id, exc)


def _acks_to_releases(batches: Batches) -> None:
    for index, (call_id, ops) in enumerate(batches):
        batches[index] = (call_id, [op.as_release() if isinstance(op, Ack) else op for op in ops])


def _split_or_set_aside(batches: Batches, reason: str) -> None:
    """Replace the refused first batch by one batch per op; a refused single op is dead-lettered.

    Derived call ids are deterministic, so a crash mid-way replays nothing twice.
    """
    call_id, ops = batches[0]
    if len(ops) > 1:
        batches[0:1] = [(f"{call_id}.{i}", [op]) for i, op in enumerate(ops)]
        return
    [op] = ops
    logger.error("clustersync: Redis refused a spooled write (%s); it goes to the dead letters",
                 reason)
    letter = dead_letter_for(op, reason)
    if letter is None:
        batches.pop(0)
        return
    batches[0] = (f"{call_id}.x", [letter])


def _write(path: Path, spooled: SpoolFile) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(spooled.to_bytes())
    os.replace(temporary, path)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _claim_is_stale(path: Path) -> bool:
    try:
        pid = int(path.name.rsplit(CLAIM_MARK, 1)[1])
    except ValueError:
        return False
    return pid != os.getpid() and not psutil.pid_exists(pid)

