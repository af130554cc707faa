"""SiteTurns: whether a site may start one more request now, the politeness half of the
download gate's decision (download_gate.py).

The gate asks a ``SiteTurns`` only once the request's Scrapy download slot has room (a free
transfer slot, nothing queued in it, no request on its way to it), so an implementation says
only *when* the site's next request may start. ``LocalTurns`` is Scrapy's own rule, today's:
one start per slot per ``DOWNLOAD_DELAY`` (jittered as Scrapy jitters it), counted from the
slot's last start (``CLUSTERSYNC_POLITENESS = "node"``). ``ClusterTurns`` (cluster_turns.py, the
default) is one budget per site for the whole cluster, decided in Redis with GCRA and reserved
in small batches: ``wait_s`` answers from the turns this node reserved and, when none are left,
asks the Redis thread for more and answers ``math.inf``; when they arrive it calls the gate's
``wake()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from scrapy.core.downloader import Slot
    from scrapy.settings import BaseSettings


class SiteTurns(Protocol):
    """When may the site of a download slot start its next request?"""

    def wait_s(self, key: str, slot: Slot | None, now: float) -> float:
        """Seconds from ``now`` (``time.monotonic()``) until site ``key``, whose Scrapy download
        slot is ``slot`` (None: Scrapy has none yet), may start a request: 0 (or less) means
        now; ``math.inf`` means not before the gate is woken (``DownloadGate.wake``). Asking
        again changes nothing."""

    def taken(self, key: str, now: float) -> None:
        """A request of site ``key`` was let through at ``now``: its turn is used."""

    def done(self, key: str) -> None:
        """A request of site ``key`` let through ended (its response or error came)."""

    def answered(self, key: str, status: int, headers: Any) -> None:
        """A response of site ``key`` came with ``status`` and ``headers`` (429/503 matter)."""


class LocalTurns:
    """Scrapy's own politeness: one start per ``slot.delay`` seconds after the slot's last start
    (``slot.lastseen``), the delay jittered by ``slot.jitter`` as Scrapy does it.

    Scrapy draws a fresh jittered delay each time it looks at a slot; a gate that drew its own
    and then let Scrapy draw again would wait for the longer of two draws. So this draws one
    delay per gap (per last start of the slot, ``Slot.download_delay()``, which reads the slot's
    current delay and jitter, so AutoThrottle and ``DOWNLOAD_SLOTS`` keep their meaning), and the
    gate lets Scrapy start the request at once when it reaches the slot (download_gate.py).
    """

    def __init__(self) -> None:
        #: per site, the gap the delay was drawn for (slot.lastseen, delay, jitter) and the draw
        self._draws: dict[str, tuple[float, float, float, float]] = {}

    def wait_s(self, key: str, slot: Slot | None, now: float) -> float:
        if slot is None or not slot.delay:
            return 0.0
        return slot.lastseen + self._delay_of(key, slot) - now

    def taken(self, key: str, now: float) -> None:
        self._draws.pop(key, None)

    def done(self, key: str) -> None:
        """Nothing to do: Scrapy's slot counts its own transfers."""

    def answered(self, key: str, status: int, headers: Any) -> None:
        """Nothing to do: Scrapy's own politeness does not look at responses."""


    def _delay_of(self, key: str, slot: Slot) -> float:
        """The delay drawn for the slot's current gap (drawn again once the slot started a
        request, or its delay or jitter changed)."""
        gap = (slot.lastseen, slot.delay, slot_jitter(slot))
        drawn = self._draws.get(key)
        if drawn is not None and drawn[:3] == gap:
            return drawn[3]
        delay = slot.download_delay()
        self._draws[key] = (*gap, delay)
        return delay


def site_turns_for(settings: BaseSettings) -> SiteTurns:
    """The ``SiteTurns`` of ``CLUSTERSYNC_POLITENESS`` (checked at start by the add-on):
    ``ClusterTurns`` ("cluster", the default) or ``LocalTurns`` ("node")."""
    if (settings.get("CLUSTERSYNC_POLITENESS") or "cluster") == "node":
        return LocalTurns()
    from .cluster_turns import ClusterTurns

    return ClusterTurns.from_settings(settings)


def slot_jitter(slot: Slot) -> float:
    """The slot's jitter: ``Slot.jitter`` (Scrapy 2.19), or the ±50% of ``randomize_delay``
    (earlier versions)."""
    jitter = getattr(slot, "jitter", None)
    if jitter is None:
        return 0.5 if getattr(slot, "randomize_delay", False) else 0.0
    return float(jitter)


def longest_delay_s(slot: Slot) -> float:
    """The longest delay ``slot.download_delay()`` can draw."""
    return slot.delay * (1 + slot_jitter(slot))
