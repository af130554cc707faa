"""SettingsPart: how the node's Redis thread follows the job's shared settings (part of
``redis_thread.SyncWorker``).

The thread learns the job's shared-settings version with every look at the control state (the
same HMGET, and "settings <N>" on the control channel: control_follower.py). Whenever it
differs from the version it last read, and after every reconnect, the next turn's round trip
reads the whole set (``SharedSettingsStore.read_in``); the thread hands it to the reactor in its
``NodeView`` (``settings``), where plugin/settings_applier.py applies it. A node that missed a
message converges with the control re-read (``control_follower.REREAD_S``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store.shared_settings import SharedSettings, SharedSettingsStore

if TYPE_CHECKING:
    from ..store import JobStore
    from ..store.round_trip import Answer, RoundTrip
    from .control_follower import ControlFollower


class SettingsPart:
    """The shared settings the Redis thread read last (see the module doc)."""

    store: JobStore
    _follower: ControlFollower

    def _init_settings(self) -> None:
        self._settings_store = SharedSettingsStore(self.store.client, self.store.keys)
        #: the set last read (None: not read yet)
        self._shared: SharedSettings | None = None
        #: read the set in the next round trip, whatever the version says (after a reconnect)
        self._settings_due = True

    def _settings_joined(self, shared: SharedSettings | None) -> None:
        """The join read ``shared`` (None: it could not): the version to follow from."""
        self._shared = shared
        self._settings_due = shared is None
        if shared is not None:
            self._follower.settings_version = shared.version

    def _settings_in(self, trip: RoundTrip) -> Answer[SharedSettings] | None:
        """A read of the set, in ``trip``, when due (``_settings_answered`` applies it)."""
        shared = self._shared
        if not self._settings_due and shared is not None and (
                shared.version == self._follower.settings_version):
            return None
        return self._settings_store.read_in(trip)

    def _settings_answered(self, answer: Answer[SharedSettings]) -> None:
        """Keep the set read (raises the store's error if the read failed: an outage)."""
        self._shared = shared = answer.result()
        self._settings_due = False
        # the read is at least as new as any version published before it
        self._follower.settings_version = shared.version

    def _settings_lost(self) -> None:
        """Redis was away: read the set again once it is back (it may be older, or newer)."""
        self._settings_due = True
