"""What the reactor and the node's Redis thread say to each other: nothing else crosses.

Reactor -> Redis thread: the ops to write (``store.Op``) and the commands below, in one FIFO
queue (``queue.SimpleQueue``; the CloseSpider counts are closespider_message.py's ``Counted``),
so the thread sees them in the order the reactor made them (a
``Took`` before the pushes of that request's callback, for instance).

Redis thread -> reactor: immutable values (``NodeView``, tuples of leased entries, the
``Undelivered`` of a close), handed over with ``reactor.callFromThread``. Each side owns
every field it writes; none is written by both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .thread_api import StartState

if TYPE_CHECKING:
    from ..store.lease_script import LeasePace
    from ..store.script_results import Heartbeat
    from ..store.shared_settings import SharedSettings
    from ..store.site_scripts import TurnsAsk


@dataclass(frozen=True)
class Busy:
    """The node did something after it was last reported idle (``activity``: the reactor's
    count of things done, so far)."""

    activity: int


@dataclass(frozen=True)
class Idle:
    """The engine has nothing in progress; ``activity`` as in ``Busy``."""

    activity: int


@dataclass(frozen=True)
class Took:
    """The reactor handed leased entry ``entry_id`` to the engine."""

    entry_id: str


@dataclass(frozen=True)
class HandedBack:
    """The reactor did not hand out ``entry_id``: a later push of the node outranks it; the
    Redis thread releases it behind that push, before it leases again."""

    entry_id: str


@dataclass(frozen=True)
class WantLease:
    """The engine starves while its own ``pushes`` first pushes are on their way: lease as
    soon as they are in Redis (the lease that comes back wakes the engine)."""

    pushes: int


@dataclass(frozen=True)
class Demand:
    """The reactor wants ``target`` entries leased ahead and not handed out (lease_sizing.py):
    the Redis thread leases what is missing once half of it is gone; 0: nothing for now."""

    target: int


@dataclass(frozen=True)
class Dropped:
    """Answer to ``drop_prefetched``: the entries the reactor held and dropped."""

    entry_ids: tuple[str, ...]


@dataclass(frozen=True)
class ReactorAlive:
    """Answer to the thread's ping: the reactor ran just now."""


@dataclass(frozen=True)
class Close:
    """The node closes: release ``unacked`` (leases under way) and what was not handed out,
    flush, leave the job, then hand back what could not be sent."""

    unacked: tuple[str, ...]


@dataclass(frozen=True)
class Totals:
    """What Redis did with this node's writes so far."""

    pushed: int = 0
    filtered: int = 0
    released: int = 0
    set_aside: int = 0


@dataclass(frozen=True)
class NodeView:
    """The node as its Redis thread last saw it, handed to the reactor whole.

    ``ops_received``: ops the thread took from the queue; ``backlog``: of the ops it took, those
    not in Redis yet; ``round_trip_s``: how long its lease calls take (an average);
    ``finished_at``: the reactor's activity count the heartbeat that found the job finished
    was sent with (None: not finished); ``control``: the job's control state (None until
    first read); ``settings``: the job's shared settings as last read (None until read; the
    reactor applies a version it has not applied: plugin/settings_applier.py);
    ``stop_reason`` and ``tickets``: the cluster's CloseSpider (closespider_part.py).
    """

    ops_received: int = 0
    backlog: int = 0
    pushes_settled: int = 0
    totals: Totals = Totals()
    rollbacks: int = 0
    start_state: StartState = StartState("none")
    cluster: Heartbeat | None = None
    finished_at: int | None = None
    state_lost: bool = False
    away: bool = False
    control: str | None = None
    round_trip_s: float = 0.0
    settings: SharedSettings | None = None
    #: the close reason a CLOSESPIDER_* limit stopped the job with ("": none)
    stop_reason: str = ""
    #: page tickets granted to this node so far (closespider.lua)
    tickets: int = 0
    #: the job's CloseSpider totals as last answered: responses, items, errors
    closespider_totals: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class WantTurns:
    """The reactor wants turns of ``ask.site`` (and frees ``ask.done``): the Redis thread
    reserves them in its next round trip and hands them back (``NodeLink.turns_reserved``).
    Asks of one site not sent yet are merged."""

    ask: TurnsAsk


@dataclass(frozen=True)
class SetPace:
    """The node's politeness settings (at start, or changed live): its leases serve each site
    no faster than ``pace`` (store/lease_script.py LeasePace)."""

    pace: LeasePace


@dataclass(frozen=True)
class SlowDown:
    """``site`` answered 429 or 503: block it for ``retry_after_s`` (its Retry-After), or, with
    None, back its delay off, for the whole cluster (``delay_s``: its delay on this node)."""

    site: str
    retry_after_s: float | None
    delay_s: float
