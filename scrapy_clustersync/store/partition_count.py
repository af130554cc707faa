"""The job's partition count, recorded in partition 0's meta when the job is created
(partitions.lua; docs/architecture.md, "Splitting a job into partitions")."""

from __future__ import annotations

from .script_base import JobScript


class PartitionsScript(JobScript):
    """partitions.lua: ``run`` records ``count`` for a job that is new and answers the job's
    count (the recorded one when the job had one: the caller compares)."""

    FILE = "partitions"
    KEYS = ("meta",)
    ARGV = ("count",)

    def call(self, count: int) -> tuple[list[str], list[int]]:
        if count < 2:
            raise ValueError("a count of 1 is never recorded: it is the absent field's meaning")
        return [self.keys.meta], [count]

    def run(self, count: int) -> int:
        return int(self._call(*self.call(count)))
