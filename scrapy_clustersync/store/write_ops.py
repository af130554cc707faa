"""The write operations of a node: one frozen record per kind, the one owner of their protocol.

Every write a node buffers for Redis (the scheduler, the Redis thread, the start() runner, the
spool replay, the CLI's seed) is one of these records. ``op.args()`` is exactly what flush.lua
reads for it: the opcode, then its fields in order (``OP_FIELDS`` in flush.lua holds the same
field counts; a test keeps the two equal). ``decode_op`` turns such a list back into its record:
the spool keeps ops on disk in that form.

No Redis here: the store sends ``args()``, nothing else looks inside an op.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeAlias

import msgpack

from ..codec_envelope import request_fields

#: one script argument, as redis-py sends it
Arg: TypeAlias = str | bytes | int | float

#: how much of a refusal's reason a dead letter keeps
REASON_MAX_CHARS = 1000
DESCRIBE_MAX_CHARS = 200


class OpDecodeError(ValueError):
    """An argument list that is no op of this version: unknown opcode, field count or type."""


class _WriteOp:
    """What every op has besides its fields."""

    #: the op's first script argument; flush.lua's OP_FIELDS knows it
    OPCODE: ClassVar[str]

    @property
    def settles(self) -> str | None:
        """The lease id this op ends (the node no longer holds it once the op is in Redis),
        or None."""
        return None


class PushFlags(enum.IntFlag):
    """How a push is queued (its ``flags`` field; flush.lua reads the same bits)."""

    #: no dedup check and no add (``dont_filter``, or dedup turned off)
    DONT_FILTER = 1
    #: a start request: after the other requests of its priority, as Scrapy's start queues
    START = 2
    #: newest first among the requests of its priority and kind (Scrapy's LIFO queues)
    LIFO = 4
    #: a request a redirect or retry made of a leased one, pushed right before the ack of that
    #: lease: queued only if that ack takes effect (a node whose lease ended, and whose request
    #: another node crawled and acked meanwhile, must not have its retry crawled again)
    REPLACES = 8


ALL_PUSH_FLAGS = int(PushFlags.DONT_FILTER | PushFlags.START | PushFlags.LIFO
                     | PushFlags.REPLACES)


def check_site(site: str) -> None:
    """ValueError for a site that cannot travel in a push: flush.lua's fields hold no tab or
    newline."""
    if "\t" in site or "\n" in site:
        raise ValueError(f"a site holds no tab and no newline, not {site!r:.60}")


@dataclass(frozen=True)
class Push(_WriteOp):
    """Queue the encoded ``request`` unless its ``fingerprint`` was seen (opcode ``P``).

    ``fingerprint``: the 20-byte cluster fingerprint, added to the job's dedup record; ``b""``
    with ``PushFlags.DONT_FILTER`` (no dedup check, no add). ``priority``: higher is leased
    first. ``flags``: ``PushFlags``. ``site``: the request's Scrapy download slot key, whose
    queue in the frontier it joins (lua/frontier.lua); "" for the job's legacy queue (an op
    spooled by an earlier version, which had none).
    """

    OPCODE: ClassVar[str] = "P"
    fingerprint: bytes
    priority: int
    request: bytes
    flags: int = 0
    site: str = ""

    def __post_init__(self) -> None:
        # made an int here, on the thread that makes the op: args() runs on the Redis thread,
        # where a value it cannot encode would hold back every later write
        flags = int(self.flags)
        if flags < 0 or flags & ~ALL_PUSH_FLAGS:
            raise ValueError(f"push flags {flags!r} are not a combination of PushFlags")
        object.__setattr__(self, "flags", flags)
        check_site(self.site)

    @property
    def dont_filter(self) -> bool:
        """The push skips the job's dedup check."""
        return bool(self.flags & PushFlags.DONT_FILTER)

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.fingerprint, self.priority, self.request, self.flags,
                self.site]

    def describe(self) -> str:
        """A short, readable form for the log: the request's URL first."""
        return (f"push of {_url_of(self.request)} (fingerprint {self.fingerprint!r:.60}, "
                f"priority {self.priority!r})")[:DESCRIBE_MAX_CHARS]


#: how many characters of a task id travel (a longer one is refused when the push is made)
TASK_ID_MAX_CHARS = 200


@dataclass(frozen=True)
class TaskPush(Push):
    """A push of a request that belongs to the user's task ``task`` (opcode ``T``).

    The script keeps entry -> task, so that the lease and the ack of the entry update the task
    without decoding the request. A push without a task is a ``P`` op, with no task field:
    nearly every push has none.
    """

    OPCODE: ClassVar[str] = "T"
    task: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.task or len(self.task) > TASK_ID_MAX_CHARS:
            raise ValueError(f"a task id is 1 to {TASK_ID_MAX_CHARS} characters, not "
                             f"{self.task!r:.60}")

    def args(self) -> list[Arg]:
        return [*super().args(), self.task]


@dataclass(frozen=True)
class _LeaseOp(_WriteOp):
    """An op that ends the lease ``entry_id``: its args are the opcode and the id."""

    #: what the op does to the entry, for ``describe()``
    ACTION: ClassVar[str]
    entry_id: str

    @property
    def settles(self) -> str | None:
        return self.entry_id

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.entry_id]

    def describe(self) -> str:
        return f"{self.ACTION} of entry {self.entry_id}"[:DESCRIBE_MAX_CHARS]


@dataclass(frozen=True)
class Ack(_LeaseOp):
    """The leased request ``entry_id`` is done: remove it from the job (opcode ``A``).

    Also removes it from the queue if its lease had expired and it was queued again.
    """

    OPCODE: ClassVar[str] = "A"
    ACTION: ClassVar[str] = "ack"

    def as_release(self) -> Release:
        """The release of the same lease: the request is crawled again (node/redis_thread.py)."""
        return Release(self.entry_id)


@dataclass(frozen=True)
class Failed(Ack):
    """The leased request ``entry_id`` is done, and failed (opcode ``F``): an ack that also
    records why, in the job's failed requests and in its task (see lease_tracker.py for what counts
    as failed).

    ``url``: the request's URL; ``status``: the HTTP status (0: no response); ``error``: the
    exception (class and message) or "HTTP <status>"; ``attempts``: downloads tried (0:
    unknown); ``errback``: the request's errback ran.
    """

    OPCODE: ClassVar[str] = "F"
    ACTION: ClassVar[str] = "failed ack"
    url: str
    status: int
    error: str
    attempts: int
    errback: bool
    #: the results to append if the ack takes effect (``AckResults``): the error record and
    #: the items the errback yielded; b"" for none (results off, or an op spooled without it)
    results: bytes = b""

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.entry_id, self.url, self.status, self.error, self.attempts,
                int(self.errback), self.results]


@dataclass(frozen=True)
class AckResults(Ack):
    """The ack of ``entry_id`` carrying the results its callback produced (opcode ``R``):
    flush.lua appends them to the job's results stream only if the ack takes effect (the entry
    is still in the job: leased, or queued again after its lease ended), so an entry's results
    are in the stream once, whichever node crawled it and however often a call is replayed.

    ``results``: msgpack (raw strings, no bin type: what Redis's cmsgpack reads) of a flat list
    ``[id, kind, d, id, kind, d, ...]``, ``d`` being results/record_format.py's ``d`` field
    (``results_blob`` builds it).
    """

    OPCODE: ClassVar[str] = "R"
    ACTION: ClassVar[str] = "ack with results"
    results: bytes = b""

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.entry_id, self.results]


@dataclass(frozen=True)
class UnleasedResults(_WriteOp):
    """Results no lease produced (opcode ``W``): items start() yielded (ids ``start:<n>``) and
    those of requests crawled on the node without a lease (kept local: they cannot travel).
    flush.lua appends each whose id the job's ``results_ids`` set (this run's) does not hold yet
    and adds it there: start() run again after a take-over or a rollback yields the same ids.
    ``results`` as ``AckResults``'s."""

    OPCODE: ClassVar[str] = "W"
    results: bytes

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.results]

    def describe(self) -> str:
        return "results without a lease"


def results_blob(records: Sequence[tuple[str, str, bytes]]) -> bytes:
    """The ``results`` field of ``AckResults``, ``Failed`` and ``UnleasedResults``: each
    ``(id, kind, d)`` in order, in one msgpack list of raw strings."""
    flat: list[str | bytes] = []
    for record in records:
        flat.extend(record)
    return packed_strings(flat)


@dataclass(frozen=True)
class PackedPushes:
    """A batch of plain pushes (``Push`` with flags 0), already packed as flush.lua reads a
    batch (``packed_pushes``): what a seed's worker processes hand its main process, which then
    has nothing left to do per URL before the write. ``count``: how many pushes it holds."""

    packed: bytes
    count: int


def packed_pushes(rows: Sequence[tuple[bytes, bytes, str]], priority: int) -> PackedPushes:
    """The pushes of ``rows`` (fingerprint, encoded request, site), each of ``priority`` and
    no flags, packed exactly as the batch of their ``Push`` records would be (flush_script.py
    packed_ops)."""
    text = str(int(priority))
    flat: list[str | bytes] = []
    for fingerprint, request, site in rows:
        check_site(site)
        flat += (Push.OPCODE, fingerprint, text, request, "0", site)
    return PackedPushes(packed_strings(flat), len(rows))


def packed_strings(values: list[str | bytes]) -> bytes:
    """``values`` as the msgpack array of strings flush.lua reads (its ops, a results field):
    bytes as msgpack's raw strings, not its bin type, which Redis's cmsgpack does not read."""
    packed: bytes = msgpack.packb(values, use_bin_type=False)
    return packed


@dataclass(frozen=True)
class Release(_LeaseOp):
    """Hand the lease ``entry_id`` back to the queue, if this node still holds it (``N``)."""

    OPCODE: ClassVar[str] = "N"
    ACTION: ClassVar[str] = "release"


@dataclass(frozen=True)
class DeadLetterEntry(_LeaseOp):
    """Move the leased entry ``entry_id`` to the job's dead letters with ``reason`` (``D``)."""

    OPCODE: ClassVar[str] = "D"
    ACTION: ClassVar[str] = "dead letter"
    reason: str

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.entry_id, self.reason]

    def describe(self) -> str:
        return f"{super().describe()} ({self.reason})"[:DESCRIBE_MAX_CHARS]


@dataclass(frozen=True)
class DeadLetterWrite(_WriteOp):
    """Record a write Redis refused as a dead letter: ``record`` is what it was (``X``).

    Built by ``dead_letter_for``: ``record`` is a push's encoded request, or any other op's
    ``args()`` packed with msgpack.
    """

    OPCODE: ClassVar[str] = "X"
    reason: str
    record: bytes

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.reason, self.record]

    def describe(self) -> str:
        return f"dead letter of a refused write ({self.reason})"[:DESCRIBE_MAX_CHARS]


@dataclass(frozen=True)
class StartDone(_WriteOp):
    """The job's start() is exhausted: no node runs it again (opcode ``S``)."""

    OPCODE: ClassVar[str] = "S"

    def args(self) -> list[Arg]:
        return [self.OPCODE]

    def describe(self) -> str:
        return "start() done"


@dataclass(frozen=True)
class StatsCounts(_WriteOp):
    """Add to the job's and the node's Scrapy stats (opcode ``C``): ``counts`` holds one
    "<stat name>\t<integer>" line per stat that grew since the node last sent it."""

    OPCODE: ClassVar[str] = "C"
    counts: str

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.counts]

    def describe(self) -> str:
        return f"stats counts ({self.counts.count(chr(10)) + 1} stats)"[:DESCRIBE_MAX_CHARS]


@dataclass(frozen=True)
class TaskFiltered(_WriteOp):
    """A request of the user's task ``task`` was dropped as a duplicate on the node (its
    sent-fingerprint cache, or the project's ``DUPEFILTER_CLASS``), so it never travels: count
    it filtered in the task's record (opcode ``K``), which it creates if the task has none, as
    a push that Redis's dedup drops does. The task is counted from its first request wherever
    that request is filtered."""

    OPCODE: ClassVar[str] = "K"
    task: str

    def __post_init__(self) -> None:
        if not self.task:
            raise ValueError("a filtered task request needs its task id")

    def args(self) -> list[Arg]:
        return [self.OPCODE, self.task]

    def describe(self) -> str:
        return f"a request of task {self.task!r} filtered on the node"[:DESCRIBE_MAX_CHARS]


#: one buffered write
Op: TypeAlias = (Push | TaskPush | Ack | Failed | AckResults | UnleasedResults | Release
                 | DeadLetterEntry | DeadLetterWrite | StartDone | StatsCounts | TaskFiltered)
OP_KINDS: dict[str, type[Op]] = {
    kind.OPCODE: kind for kind in (Push, TaskPush, Ack, Failed, Release, DeadLetterEntry,
                                   DeadLetterWrite, StartDone, StatsCounts, TaskFiltered,
                                   AckResults, UnleasedResults)
}


def _field_types(kind: type[Op]) -> tuple[tuple[str, type], ...]:
    hints = typing.get_type_hints(kind)
    return tuple((each.name, hints[each.name]) for each in fields(kind))


#: opcode -> (name, type) of each field after it, in order
OP_FIELD_TYPES = {opcode: _field_types(kind) for opcode, kind in OP_KINDS.items()}
#: the fields of a push spooled by an earlier version, which had no site (it goes to the
#: legacy queue)
_SITELESS_FIELD_TYPES = {
    opcode: tuple(field for field in OP_FIELD_TYPES[opcode] if field[0] != "site")
    for opcode in (Push.OPCODE, TaskPush.OPCODE)
}


def decode_op(args: Sequence[Any]) -> Op:
    """The op whose ``args()`` is ``args``; raises OpDecodeError if it is none of this version.

    ``args`` as msgpack gives it back (``raw=False``): str for text, bytes for bytes. An unknown
    opcode, a wrong field count or a field of the wrong type is refused, never guessed.
    """
    if not args:
        raise OpDecodeError("an empty op: no opcode")
    opcode, *values = args
    if not isinstance(opcode, str) or opcode not in OP_KINDS:
        raise OpDecodeError(f"unknown opcode {opcode!r}; this version writes "
                            f"{', '.join(OP_KINDS)}")
    expected = OP_FIELD_TYPES[opcode]
    values = _with_site(opcode, values)
    if len(values) != len(expected):
        raise OpDecodeError(f"op {opcode!r} has {len(values)} fields, not {len(expected)}")
    decoded: list[Any] = []
    for (name, wanted), value in zip(expected, values, strict=True):
        if not _has_type(value, wanted):
            raise OpDecodeError(f"op {opcode!r}: field {name} is {value!r:.60}, "
                                f"not of type {wanted.__name__}")
        decoded.append(bool(value) if wanted is bool else value)
    try:
        return OP_KINDS[opcode](*decoded)
    except ValueError as exc:  # a value the record refuses, e.g. push flags of no known meaning
        raise OpDecodeError(f"op {opcode!r}: {exc}") from None


def _with_site(opcode: str, values: list[Any]) -> list[Any]:
    """The fields of an op spooled by an earlier version with what it lacks: a push's site ""
    (after flags, the fourth field), a failed ack's results b"" (its last); any other op's
    unchanged."""
    siteless = _SITELESS_FIELD_TYPES.get(opcode)
    if siteless is not None and len(values) == len(siteless):
        return [*values[:4], "", *values[4:]]
    if opcode == Failed.OPCODE and len(values) == len(OP_FIELD_TYPES[opcode]) - 1:
        return [*values, b""]
    return values


def _has_type(value: Any, wanted: type) -> bool:
    if wanted is bool:
        return value in (0, 1) and isinstance(value, int)  # args() sends a bool as 0 or 1
    return isinstance(value, wanted)


def dead_letter_for(op: Op, reason: str) -> DeadLetterWrite | None:
    """The op that records ``op``, which Redis refused for ``reason``, as a dead letter.

    A push keeps its encoded request, any other op its ``args()`` packed with msgpack. None for
    a DeadLetterWrite (even the dead letter was refused: only the log keeps it).
    """
    if isinstance(op, DeadLetterWrite):
        return None
    try:
        record = op.request if isinstance(op, Push) else msgpack.packb(op.args(),
                                                                       use_bin_type=True)
    except (TypeError, ValueError, OverflowError):  # what cannot be packed is kept as text
        record = repr(op).encode()
    return DeadLetterWrite(f"refused by Redis: {reason}"[:REASON_MAX_CHARS], record)


def _url_of(request: bytes) -> str:
    """The URL in an encoded request (codec.py's envelope), or "?"."""
    try:
        return str(request_fields(request)["url"])
    except Exception:
        return "?"
