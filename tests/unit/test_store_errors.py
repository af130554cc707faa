"""Redis errors become the store's own: an outage when Redis cannot serve writes for now.

A Redis that is up but cannot take writes (failover, OOM, ...) is an outage like a lost
connection, not a refusal: the node buffers and retries, on a new connection.
"""

from __future__ import annotations

from unittest import mock

import pytest
import redis
from redis._parsers import BaseParser

from scrapy_clustersync.store import StateLost, StoreError, StoreUnavailable
from scrapy_clustersync.store.errors import AccessRefused, translate_errors

#: replies as Redis sends them (after the "-") -> what the store must raise, and its words
REPLIES = [
    ("READONLY You can't write against a read only replica.", StoreUnavailable,
     "read-only replica now (failover?)"),
    ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
     StoreUnavailable, "lost its primary"),
    ("LOADING Redis is loading the dataset in memory", StoreUnavailable, "loading its data"),
    ("OOM command not allowed when used memory > 'maxmemory'.", StoreUnavailable,
     "out of memory"),
    ("MISCONF Errors writing to the AOF file: No space left on device", StoreUnavailable,
     "cannot persist"),
    ("NOREPLICAS Not enough good replicas to write.", StoreUnavailable, "too few replicas"),
    ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
     StoreUnavailable, "busy running a script"),
    ("CLUSTERDOWN The cluster is down", StoreUnavailable, "cluster is down"),
    ("TRYAGAIN Multiple keys request during rehashing of slot", StoreUnavailable, "try again"),
    # Redis < 7 wraps an error raised inside a script
    ("ERR Error running script (call to f_1028a5): @user_script:4: @user_script: 4: "
     "-READONLY You can't write against a read only replica.", StoreUnavailable,
     "read-only replica now"),
    ("CLUSTERSYNC_STATE_LOST job epoch missing or changed", StateLost, "CLUSTERSYNC_STATE_LOST"),
    ("WRONGTYPE Operation against a key holding the wrong kind of value", StoreError,
     "WRONGTYPE"),
    ("BUSYKEY Target key name already exists.", StoreError, "BUSYKEY"),
    # a refusal of this client is never an outage: retrying cannot help
    ("NOPERM User crawler has no permissions to run the 'evalsha' command", AccessRefused,
     "no permissions"),
    ("WRONGPASS invalid username-password pair or user is disabled.", AccessRefused,
     "invalid username-password"),
    ("NOAUTH Authentication required.", AccessRefused, "Authentication required"),
]



@pytest.mark.parametrize(("reply", "raised", "words"), REPLIES)
def test_a_server_that_cannot_take_writes_now_is_an_outage_and_its_connections_are_dropped(
    reply: str, raised: type[StoreError], words: str
) -> None:
    # given the error redis-py raises for this reply, inside a store call
    client = redis.Redis()
    error = BaseParser.parse_error(reply)
    # when the store translates it
    with (mock.patch.object(client.connection_pool, "disconnect") as disconnect,
          pytest.raises(StoreError) as caught, translate_errors(client)):
        raise error
    # then it is an outage exactly when the server cannot serve writes for now, and says why;
    # only then are the pooled connections dropped, so that the retry connects again
    assert type(caught.value) is raised
    assert words in str(caught.value)
    assert disconnect.called is (raised is StoreUnavailable)
