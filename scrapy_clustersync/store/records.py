"""The formats of the values a job stores in Redis: one owner each, to write and to read back.

The Lua scripts write most of these values. Each format has one place in the Lua too, named
here, and tests read what the scripts wrote back through these parsers (tests/test_formats.py):

- ``BloomLayout``: bloom hash field ``layout<i>``; bloom.lua ``layout_text``, and the layer
  descriptions of the flush script's ARGV, in the same field order (``layout_from_argv``)
- ``LeaseValue``: a value of the leased hash; prelude.lua ``lease_value`` and ``parse_lease``
  (used by flush.lua, lease.lua, heartbeat.lua and check.lua)
- ``DeadLetter``: an item of the dead list; flush.lua ``dead_letter`` (for ops D and X)
- node record: a value of the node_info hash, the JSON object the node sends with each
  heartbeat (heartbeat.lua stores it as it is)
- death record: a value of the dead_nodes hash, JSON written by heartbeat.lua ``declare_dead``
  (declared_ms first: the script matches it there) and parsed by script_results.py ``DeadNode``

No Redis here: values come in as redis-py returns them (bytes) or as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .bloom_layout import Layer

#: the entry id of the dead letter of a refused write (it never became an entry)
REFUSED_WRITE_ID = "-"
NODE_RECORD_UNREADABLE = "unreadable"


class FormatError(ValueError):
    """A stored value that is not in the format its owner writes (another program wrote it)."""


class BloomLayout(NamedTuple):
    """The layout of one Bloom layer: "<bits> <hashes> <chunk_bits> <chunks> <capacity>".

    The flush script gets each described layer as these five numbers, in this order, and
    stores the layout of a layer it takes into use, as text, in bloom field ``layout<i>``.
    """

    bits: int
    hashes: int
    chunk_bits: int
    chunks: int
    capacity: int

    @classmethod
    def of(cls, layer: Layer) -> BloomLayout:
        return cls(layer.bits, layer.hashes, layer.chunk_bits, layer.chunks, layer.capacity)

    @property
    def size_bytes(self) -> int:
        """The bytes its chunk strings hold together."""
        return self.chunk_bits // 8 * self.chunks

    def format(self) -> str:
        return " ".join(str(value) for value in self)

    @classmethod
    def parse(cls, value: str | bytes) -> BloomLayout:
        """The layout in ``value``; FormatError if it is not five integers."""
        parts = as_text(value).split()
        try:
            if len(parts) == len(cls._fields):
                return cls(*(int(part) for part in parts))
        except ValueError:
            pass
        raise FormatError(f"Bloom layout {value!r:.100} is not {len(cls._fields)} integers "
                          f"({', '.join(cls._fields)})")


class LeaseValue(NamedTuple):
    """What the leased hash holds for a leased entry: "<queue score>|<node id>", and for an
    entry of the frontier "\n<where>" after it (lua/prelude.lua lease_value).

    ``score``: the entry's queue score (-priority), restored when the lease ends; ``node``:
    the node that holds the lease; ``where``: the entry's kind (one character) and site, whose
    frontier list it goes back to ("" for the legacy queue).
    """

    score: float
    node: str
    where: str = ""

    def format(self) -> str:
        # the score as Redis writes one: no ".0" on a whole number
        score = str(int(self.score)) if self.score.is_integer() else repr(self.score)
        return f"{score}|{self.node}" + (f"\n{self.where}" if self.where else "")

    @classmethod
    def parse(cls, value: str | bytes) -> LeaseValue:
        """The lease in ``value``; FormatError if it has no "|" or no numeric score."""
        score, separator, rest = as_text(value).partition("|")
        node, _, where = rest.partition("\n")
        try:
            if separator:
                return cls(float(score), node, where)
        except ValueError:
            pass
        raise FormatError(f"lease value {value!r:.100} is not '<queue score>|<node id>'")


@dataclass(frozen=True)
class DeadLetter:
    """An item of the dead list: "<entry id>\\t<node>\\t<server ms>\\t<reason>\\n<entry>".

    ``entry_id``: the dead entry's id, or ``REFUSED_WRITE_ID`` for a write Redis refused;
    ``node``: the node that wrote it; ``at_ms``: Redis server time; ``entry``: the entry's
    encoded request (b"" if it was gone), or for a refused write what write_ops.dead_letter_for
    kept of it. A newline in the reason is stored as a space.
    """

    entry_id: str
    node: str
    at_ms: int
    reason: str
    entry: bytes

    @property
    def refused_write(self) -> bool:
        """True for a write Redis refused (set aside by the node), not a queued entry."""
        return self.entry_id == REFUSED_WRITE_ID

    def format(self) -> bytes:
        head = "\t".join([self.entry_id, self.node, str(self.at_ms), one_line(self.reason)])
        return head.encode() + b"\n" + self.entry

    @classmethod
    def parse(cls, value: bytes | str) -> DeadLetter:
        """The dead letter in ``value``; FormatError if its head lacks a field."""
        head, newline, entry = as_bytes(value).partition(b"\n")
        fields = head.decode("utf-8", "replace").split("\t", 3)
        if newline and len(fields) == 4 and fields[2].isdigit():
            entry_id, node, at_ms, reason = fields
            return cls(entry_id, node, int(at_ms), reason, entry)
        raise FormatError(f"dead letter {value!r:.100} is not '<entry id>\\t<node>\\t"
                          "<server ms>\\t<reason>\\n<entry>'")


def one_line(reason: str) -> str:
    """``reason`` as a dead letter stores it: newlines become spaces."""
    return reason.replace("\n", " ")


def format_node_record(info: Mapping[str, Any]) -> str:
    """The node record a heartbeat stores: ``info`` (JSON-ready values) as a JSON object.

    What a node sends is node/node_record.py's snapshot and its state ("starting", "crawling",
    "idle", "disconnected", "closed"; node/redis_thread.py ``_state``); readers take every field as
    optional.
    """
    return json.dumps(dict(info))


def parse_node_record(value: str | bytes) -> dict[str, Any]:
    """The record a node's heartbeat stored. A value that is no JSON object (another program
    wrote it) gives ``{NODE_RECORD_UNREADABLE: <its first 200 characters>}``, so that one bad
    record does not hide the others.
    """
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return {NODE_RECORD_UNREADABLE: text[:200]}
    return record


def as_text(value: Any) -> str:
    """A Redis reply as text (redis-py returns bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def as_bytes(value: Any) -> bytes:
    """A Redis reply as bytes."""
    return value if isinstance(value, bytes) else str(value).encode()


def json_objects(raw: Iterable[bytes | str]) -> list[dict[str, Any]]:
    """The JSON objects among ``raw`` (a list's values), in order: a value that is no JSON
    object (another program wrote it) is left out."""
    records = []
    for each in raw:
        try:
            record = json.loads(each)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
