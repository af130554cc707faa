"""NodeControl: how a node follows the job's control state (``clustersync pause|resume|stop``).

The state lives in Redis (the job's meta field ``control``, changed by ``control.lua``). A
daemon thread of the node listens on the job's control channel (a connection of its own) and
re-reads the field every ``REREAD_S``: the message applies a change at once, the re-read makes
a node that missed it (a dropped connection, a node that joined meanwhile) converge within
that time. When Redis is away the thread keeps the last state it knew and reconnects quietly.

The reactor side only reads ``state`` (one attribute, replaced whole: safe across threads):
the scheduler hands out no request unless the job runs (``allows_downloads``), and the control
extension (extensions/control.py) stops leasing, wakes the engine on resume and closes the
node on a stop.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ..store import StoreError
from ..store.control_state import (
    PAUSED,
    RUNNING,
    STOPPED,
    STOPPING,
    ControlState,
    ControlSubscription,
)

if TYPE_CHECKING:
    from ..store.control_state import ControlStore

logger = logging.getLogger(__name__)

#: how often the state is read again, whatever the channel said (a missed message is applied
#: within this time; the job control promise is 1 s)
REREAD_S = 0.5
#: wait before subscribing again after Redis went away
RECONNECT_S = 1.0

__all__ = ["PAUSED", "REREAD_S", "RUNNING", "STOPPED", "STOPPING", "NodeControl"]


class NodeControl:
    """The job's control state as this node knows it, kept up to date by a daemon thread."""

    def __init__(self, control: ControlStore, job: str, reread_s: float = REREAD_S) -> None:
        self._control = control
        self.job = job
        self._reread_s = reread_s
        #: the last state read or heard (replaced whole, so the reactor may read it any time)
        self.state = RUNNING
        self._stop = threading.Event()
        self._subscription: ControlSubscription | None = None
        self._thread = threading.Thread(target=self._run, name="clustersync-control",
                                        daemon=True)

    # ---- reactor side ----------------------------------------------------------------------
    def start(self) -> None:
        """Read the state once now (so the node never downloads on a paused job), then follow
        it in the background."""
        try:
            self._read()
        except StoreError as exc:  # the thread tries again
            logger.debug("clustersync: cannot read the control state of job %r: %s",
                         self.job, exc)
        self._thread.start()

    @property
    def allows_downloads(self) -> bool:
        """True while the job runs: a paused or stopping job hands out no new request."""
        return self.state == RUNNING

    def close(self) -> None:
        """Stop following the state (at once: the thread ends by itself); a stop this node
        held up is settled (the last node to leave turns ``stopping`` into ``stopped``).
        Never raises: the node is closing."""
        self._stop.set()  # the thread ends after its current wait (a daemon: never waited for)
        if self.state in (STOPPING, STOPPED):
            try:
                self._control.change("settle")
            except StoreError as exc:
                logger.debug("clustersync: could not settle the stop of job %r: %s", self.job, exc)

    # ---- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except StoreError as exc:  # Redis away: the heartbeat says so; retry quietly
                logger.debug("clustersync: job control channel of %r lost (%s); retrying",
                             self.job, exc)
                self._stop.wait(RECONNECT_S)
            except Exception:  # a bug must not end the thread: the node would stop following
                logger.warning("clustersync: unexpected error following the control state of "
                               "job %r; retrying", self.job, exc_info=True)
                self._stop.wait(RECONNECT_S)
            finally:
                if self._subscription is not None:
                    self._subscription.close()
                    self._subscription = None

    def _follow(self) -> None:
        """Subscribe, then apply every message and re-read every ``reread_s``."""
        self._subscription = subscription = self._control.subscribe()
        self._read()  # a change made while the node was not subscribed
        while not self._stop.is_set():
            heard = subscription.wait(self._reread_s)
            if heard is not None:
                self._apply(ControlState.parse(heard, None))
            self._read()

    def _read(self) -> None:
        self._apply(self._control.read())

    def _apply(self, found: ControlState) -> None:
        if found.state != self.state:
            self.state = found.state
