"""Writes that could not reach Redis when a node closed are kept on local disk, not dropped.

The next node of the same job started in the same directory sends them first.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgpack

from .store import Op

logger = logging.getLogger(__name__)


class Spool:
    def __init__(self, directory: str | Path, job: str) -> None:
        self.directory = Path(directory) / job

    def save(self, node_id: str, ops: list[Op]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{node_id.replace(':', '_')}.msgpack"
        path.write_bytes(msgpack.packb([list(op) for op in ops], use_bin_type=True))
        return path

    def take(self) -> list[Op]:
        """Every spooled op of the job, oldest file first; the files are removed."""
        if not self.directory.is_dir():
            return []
        ops: list[Op] = []
        for path in sorted(self.directory.glob("*.msgpack"), key=lambda p: p.stat().st_mtime):
            try:
                ops.extend(tuple(op) for op in msgpack.unpackb(path.read_bytes(), raw=False))
            except Exception as exc:
                logger.error("clustersync: spool file %s is unreadable (%s); kept as is", path, exc)
                continue
            path.unlink()
            logger.warning("clustersync: sending %d writes spooled in %s", len(ops), path)
        return ops
