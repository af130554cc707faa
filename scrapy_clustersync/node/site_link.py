"""The reactor's side of the site calls (part of ``reactor_link.NodeLink``): ``ClusterTurns``
(plugin/cluster_turns.py) asks for turns and reports 429/503 here; the Redis thread hands the
turns reserved back to ``turns_reserved``, and the sites any node slowed down to
``site_slowed`` (site_calls.py has the thread's side)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .thread_api import ReservedTurns
from .thread_messages import SetPace, SlowDown, WantTurns

if TYPE_CHECKING:
    from ..store.lease_script import LeasePace
    from ..store.site_scripts import TurnsAsk

#: what is told of the turns reserved for a site
TurnsListener = Callable[[str, ReservedTurns], None]
#: what is told of a site some node found slowed down
SlowedListener = Callable[[str], None]


class SiteLinkPart:
    """Site calls of ``NodeLink`` (see the module doc)."""

    _turns_listener: TurnsListener | None = None
    _slowed_listener: SlowedListener | None = None

    def want_turns(self, ask: TurnsAsk) -> None:
        """Reserve turns of ``ask.site`` (and free ``ask.done``) in the thread's next round trip;
        ``listen_turns``' callback gets them."""
        self._say(WantTurns(ask), True)

    def slow_down(self, site: str, retry_after_s: float | None, delay_s: float) -> None:
        """``site`` answered 429/503: block it ``retry_after_s``, or back it off (None), for
        the whole cluster, at once."""
        self._say(SlowDown(site, retry_after_s, delay_s), True)

    def set_pace(self, pace: LeasePace) -> None:
        """Lease each site's requests no faster than ``pace`` from now on."""
        self._say(SetPace(pace))

    def listen_turns(self, callback: TurnsListener) -> None:
        """Call ``callback(site, turns)`` on the reactor with each reservation's answer."""
        self._turns_listener = callback

    def listen_slowed(self, callback: SlowedListener) -> None:
        """Call ``callback(site)`` on the reactor when any node (this one too) found ``site``
        slowed down by a 429/503: the turns reserved of it before are not to be used."""
        self._slowed_listener = callback

    def site_slowed(self, site: str) -> None:
        """Called on the reactor by the Redis thread (callFromThread)."""
        if self._slowed_listener is not None:
            self._slowed_listener(site)

    def turns_reserved(self, site: str, turns: ReservedTurns) -> None:
        """Called on the reactor by the Redis thread (callFromThread)."""
        if self._turns_listener is not None:
            self._turns_listener(site, turns)

    if TYPE_CHECKING:  # provided by NodeLink
        def _say(self, message: object, wake: bool = False) -> None: ...
