"""The HTTP workers' protocol (docs/http-workers.md): a node that cannot reach Redis joins a job,
leases its requests, pushes what it found, acks and heartbeats through serve, under
``/api/v1/jobs/{job}/nodes/{node}/``. Every route runs the job's own scripts (the JobStore a
Redis node uses), so leases, acks, dedup and dead-node reclaiming are the same; every call that
changes the job carries the worker's call id and is applied once however often it is sent.

Two forms: ``calls`` (msgpack), the Scrapy node's transport, runs the job's scripts as the node
sends them (node_calls.py); ``join``, ``lease``, ``flush``, ``heartbeat`` and ``leave`` (JSON)
are the same steps for a client of a few dozen lines, URLs in and out (node_steps.py).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgpack
from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from ..config import JOB_NAME_RE
from ..store.node_calls import MAX_CALLS, Refused, check_call, run_calls
from .api_errors import ApiError
from .auth import Caller, api_of, need
from .node_steps import FlushBody, HeartbeatBody, JoinBody, LeaseBody, NodeSteps

router = APIRouter(prefix="/api/v1/jobs/{job}/nodes/{node}")
#: who may work on a job over HTTP: an operator token (it may seed and steer the job anyway)
Worker = Annotated[Caller, Depends(need("operator"))]
MSGPACK = "application/msgpack"


def check_names(job: str, node: str) -> None:
    """ApiError 422 unless ``job`` is a job name and ``node`` a node id."""
    if not JOB_NAME_RE.match(job):
        raise ApiError(422, f"{job!r} is no job name")
    if not node or len(node) > 200 or any(c in node for c in "\t\n\r "):
        raise ApiError(422, "a node id is 1 to 200 characters, no space, tab or newline")


@router.post("/calls", summary="The Scrapy node's transport: its script calls (msgpack)")
async def calls(request: Request, job: str, node: str, _caller: Worker) -> Response:
    check_names(job, node)
    raw = await request.body()
    try:
        given = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        commands, multi = given["calls"], bool(given.get("multi", False))
    except Exception:
        raise ApiError(422, 'the body must be msgpack {"calls": [[command, arg, ...], ...]}') \
            from None
    if not isinstance(commands, list) or len(commands) > MAX_CALLS:
        raise ApiError(422, f"calls: a list of at most {MAX_CALLS} commands")
    try:
        checked = [check_call(call, job, node) for call in commands]
    except Refused as exc:
        raise ApiError(403, f"refused: {exc}") from None
    client = api_of(request).client
    # (Redis away: StoreUnavailable, answered 503 as by every route: the node backs off)
    replies = await run_in_threadpool(run_calls, client, checked, multi)
    return Response(msgpack.packb({"replies": replies}, use_bin_type=True), media_type=MSGPACK)


def _steps(request: Request, job: str, node: str) -> NodeSteps:
    check_names(job, node)
    return NodeSteps.of(api_of(request), job, node)


@router.post("/join", summary="Join the job as a worker (never runs the spider's start())")
def join(request: Request, job: str, node: str, body: JoinBody,
         _caller: Worker) -> dict[str, Any]:
    return _steps(request, job, node).join(body)


@router.post("/lease", summary="Lease up to `count` queued requests for `lease_ms`")
def lease(request: Request, job: str, node: str, body: LeaseBody,
          _caller: Worker) -> dict[str, Any]:
    return _steps(request, job, node).lease(body)


@router.post("/flush", summary="Push found URLs, ack (or fail, or release) leased requests")
def flush(request: Request, job: str, node: str, body: FlushBody,
          _caller: Worker) -> dict[str, Any]:
    return _steps(request, job, node).flush(body)


@router.post("/heartbeat", summary="Stay alive, renew leases, learn the job's state")
def heartbeat(request: Request, job: str, node: str, body: HeartbeatBody,
              _caller: Worker) -> dict[str, Any]:
    return _steps(request, job, node).heartbeat(body)


@router.post("/leave", summary="Leave the job (a last heartbeat with no liveness left)")
def leave(request: Request, job: str, node: str, body: HeartbeatBody,
          _caller: Worker) -> dict[str, Any]:
    return _steps(request, job, node).heartbeat(body, leaving=True)
