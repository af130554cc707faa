"""What every script class of the job shares: loading its Lua file, calling it, its header.

Each script of ``lua/`` has one class (flush_script.py, lease_script.py, heartbeat_script.py,
join_scripts.py, bloom_scripts.py, check_script.py, control_state.py, dead_requeue.py,
primary_note.py, ...) that builds the script's KEYS and ARGV from the job's keys and its typed
arguments, and parses its reply into the types of script_results.py. ``KEYS`` and ``ARGV`` name
the fixed entries, in order, exactly as the script's header lists them and its first lines bind
them to locals; ``KEYS_TAIL`` and ``ARGV_TAIL`` name the variable rest (``KEYS[n..]``) when the
script takes one (tests/unit/test_lua_scripts.py keeps the three in step).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from importlib import resources
from typing import Any, ClassVar

import redis

from .errors import RolledBack, translate_errors
from .keys import JobKeys

CALL_ID_BYTES = 8


def load_lua(name: str, *helpers: str) -> str:
    """The script ``lua/<name>.lua``, after ``lua/prelude.lua`` and the other ``helpers``."""
    scripts = resources.files("scrapy_clustersync.store").joinpath("lua")
    parts = ["prelude", *helpers, name]
    return "".join(scripts.joinpath(f"{part}.lua").read_text() for part in parts)


def new_call_id() -> str:
    """A fresh call id: a script that sees the same id twice changes nothing the second time."""
    return uuid.uuid4().hex[: CALL_ID_BYTES * 2]


def rolled_back_counter(exc: RolledBack) -> int:
    """The write counter Redis holds, from a CLUSTERSYNC_ROLLED_BACK error (prelude.lua)."""
    return int(str(exc).split("CLUSTERSYNC_ROLLED_BACK", 1)[1].split()[0])


class JobScript:
    """One Lua script of a job, registered with redis-py (which reloads it after NOSCRIPT).

    Subclasses set ``FILE`` (``lua/<FILE>.lua``), the ``HELPERS`` loaded before it (after
    prelude.lua), and the names of its KEYS and ARGV; their ``run`` builds the call and parses
    the reply. Errors come out as the store's own (errors.py).
    """

    FILE: ClassVar[str]
    HELPERS: ClassVar[tuple[str, ...]] = ()
    KEYS: ClassVar[tuple[str, ...]]
    ARGV: ClassVar[tuple[str, ...]]
    KEYS_TAIL: ClassVar[str | None] = None
    ARGV_TAIL: ClassVar[str | None] = None

    def __init__(self, client: redis.Redis, keys: JobKeys) -> None:
        self.client = client
        self.keys = keys
        self._text = load_lua(self.FILE, *self.HELPERS)
        self._script = client.register_script(self._text)
        self._sent = False  # the script's text went to Redis once (EVAL caches it there)

    def _call(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """The script's reply to ``keys`` and ``args``; redis-py errors become StoreErrors.

        The first call sends the script's text (EVAL, which also caches it in Redis): one round
        trip, where EVALSHA, NOSCRIPT and SCRIPT LOAD would make three. Later calls send its
        SHA only (redis-py loads it again after NOSCRIPT: a restarted Redis)."""
        with translate_errors(self.client):
            if self._sent:
                return self._script(keys=list(keys), args=list(args))
            reply = self.client.eval(self._text, len(keys), *keys, *args)
            self._sent = True
            return reply

    def queue(self, pipe: redis.client.Pipeline, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Add the call to ``pipe``, sent with other calls in one round trip (round_trip.py):
        EVALSHA, or EVAL with the text until Redis has it (``sent``)."""
        if self._sent:
            pipe.evalsha(self._script.sha, len(keys), *keys, *args)
        else:
            # (what pipe.eval sends; a cluster client's pipeline has no eval of that form)
            pipe.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
                "EVAL", self._text, len(keys), *keys, *args)

    def sent(self) -> None:
        """Redis ran the script's text (in a round trip): later calls send its SHA only."""
        self._sent = True
