"""Replies of a Redis that is up but cannot take this node's writes right now.

A failover that demotes the server to a replica (READONLY), a replica cut from its primary
(MASTERDOWN), a server loading its data (LOADING), out of memory (OOM), unable to persist
(MISCONF), waiting for replicas (NOREPLICAS), stuck in a long script (BUSY), or a cluster in
trouble (CLUSTERDOWN, TRYAGAIN): each passes, and then the same call succeeds. So each is an
outage, like a lost connection: the node buffers its writes and retries the same call. The
client's pooled connections are dropped too, so the retry connects again and follows the
address (DNS name, virtual IP, proxy) to whichever server is the primary now.
"""

from __future__ import annotations

import re

import redis

#: error code -> what it means for the node, said plainly
NOT_SERVING: dict[str, str] = {
    "READONLY": "Redis is a read-only replica now (failover?)",
    "MASTERDOWN": "Redis is a replica that lost its primary (failover under way?)",
    "LOADING": "Redis is loading its data set into memory",
    "OOM": "Redis is out of memory (maxmemory reached, nothing it may evict)",
    "MISCONF": "Redis cannot persist to disk and refuses writes",
    "NOREPLICAS": "Redis has too few replicas in sync to accept writes (min-replicas-to-write)",
    "BUSY": "Redis is busy running a script past its time limit",
    "CLUSTERDOWN": "the Redis cluster is down",
    "TRYAGAIN": "Redis asks to try again (resharding or failover under way)",
}

#: redis-py strips the code off the replies it has a class for; most specific class first
_CODE_OF_CLASS: tuple[tuple[type[redis.RedisError], str], ...] = (
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
)

#: a code leading the reply, or after "-" where Redis < 7 wraps a script's error:
#: "Error running script (call to f_...): @user_script:4: @user_script: 4: -READONLY ..."
_LEADING_CODE = re.compile(r"^(?:.*?: -)?([A-Z]+)\b")


def error_code(exc: redis.RedisError) -> str | None:
    """The Redis error code of ``exc`` (READONLY, OOM, ...), or None when it has none."""
    for cls, code in _CODE_OF_CLASS:
        if isinstance(exc, cls):
            return code
    match = _LEADING_CODE.match(str(exc))
    return match.group(1) if match else None


def not_serving(exc: redis.RedisError) -> str | None:
    """Why Redis cannot serve writes right now, if that is what ``exc`` says; else None."""
    code = error_code(exc)
    if code not in NOT_SERVING:
        return None
    detail = str(exc)
    if not detail.startswith(code):
        detail = f"{code} {detail}"
    return f"{NOT_SERVING[code]}: {detail}"


def drop_connections(client: redis.Redis) -> None:
    """Close ``client``'s idle connections, so its next call connects (and resolves) again.

    redis-py gives a connection back to the pool before its error reaches the caller, so the
    one that got the reply is among them. Connections in use by another thread are left alone:
    if they still reach the old server, their own error reply drops them in turn.
    """
    if isinstance(client, redis.cluster.RedisCluster):
        return  # it learns where the slots went (MOVED, a lost node) and reconnects itself
    client.connection_pool.disconnect(inuse_connections=False)
    single = client.connection  # a single_connection_client keeps its one connection here
    if single is not None:
        single.disconnect()
