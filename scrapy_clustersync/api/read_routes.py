"""The HTTP API's reads (role read): each answers what the ``clustersync`` command of the same
name prints with ``--json``, made by the same function. They read from CLUSTERSYNC_READ_URL's
Redis (a replica near serve) when serve was given one (``ApiContext.reader``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from ..cli.check_commands import needs_a_person
from ..cli.config_commands import shown_history
from ..cli.dead_commands import dead_letter_dict
from ..cli.node_view import group_nodes
from ..cli.site_view import sites_dict
from ..cli.status_view import job_rows, status_dict
from ..live_settings import masked
from ..store.partition_reads import job_frontier, job_sites
from ..store.shared_settings import SharedSettingsStore
from ..store.site_scripts import SITES_SHOWN
from ..store.task_records import TASK_STATES, job_control, read_failed, read_task, read_tasks
from .api_errors import ApiError
from .auth import Caller, api_of, need

router = APIRouter(prefix="/api")
Reader = Annotated[Caller, Depends(need("read"))]
Limit = Annotated[int, Query(ge=1, le=1000, description="how many, newest first")]


@router.get("/whoami", summary="Who this request is, and whether tokens are needed")
def whoami(request: Request, caller: Reader) -> dict[str, Any]:
    api = api_of(request)
    return {"name": caller.name, "role": caller.role,
            "tokens_needed": bool(api.tokens.tokens()) or not api.loopback}


@router.get("/jobs", summary="Every job on the Redis (clustersync jobs --json)")
def jobs(request: Request, _caller: Reader) -> list[dict[str, Any]]:
    api = api_of(request)
    return job_rows(api.reader, api.job_names())


@router.get("/jobs/{job}", summary="One job's status (clustersync status JOB --json; "
                                  "check: --check's needs_attention too)")
def job_status(request: Request, job: str, _caller: Reader,
               check: Annotated[bool, Query(description="also what needs a person, as "
                                                        "status --check says")] = False
               ) -> dict[str, Any]:
    store, report = api_of(request).job_status(job, read=True)
    summary = status_dict(report)
    if check:
        summary["needs_attention"] = needs_a_person(store, report)
    return summary


@router.get("/jobs/{job}/nodes",
            summary="Every node of the job, live and dead, each with its group "
                    "(clustersync nodes JOB --json)")
def nodes(request: Request, job: str, _caller: Reader) -> list[dict[str, Any]]:
    return group_nodes(api_of(request).job_status(job, read=True)[1]).tagged()


@router.get("/jobs/{job}/sites",
            summary="The deepest sites of the queue and the sites' politeness budgets "
                    "(clustersync status JOB --sites --json)")
def sites(request: Request, job: str, _caller: Reader,
          limit: Annotated[int, Query(ge=1, le=1000)] = SITES_SHOWN) -> dict[str, Any]:
    store = api_of(request).read_store(job)
    return sites_dict(*job_sites(store.client, store.keys, limit),
                      job_frontier(store.client, store.keys, limit))


@router.get("/jobs/{job}/tasks", summary="The job's tasks (clustersync tasks JOB --json)")
def tasks(request: Request, job: str, _caller: Reader,
          state: Annotated[list[str] | None, Query(description="only tasks in these states")]
          = None) -> list[dict[str, Any]]:
    unknown = sorted(set(state or ()) - set(TASK_STATES))
    if unknown:
        raise ApiError(422, f"unknown task state(s) {', '.join(unknown)}; the states are "
                            f"{', '.join(TASK_STATES)}")
    store = api_of(request).read_store(job)
    records, control = read_tasks(store), job_control(store)
    return [r.to_dict(control) for r in records if not state or r.shown_state(control) in state]


@router.get("/jobs/{job}/tasks/{task}", summary="One task (clustersync task JOB ID --json)")
def task(request: Request, job: str, task: str, _caller: Reader) -> dict[str, Any]:
    store = api_of(request).read_store(job)
    record = read_task(store, task)
    if record is None:
        raise ApiError(404, f"job {job!r} has no task {task!r}")
    return record.to_dict(job_control(store))


@router.get("/jobs/{job}/failed",
            summary="The newest failed requests (clustersync failed JOB --json)")
def failed(request: Request, job: str, _caller: Reader, limit: Limit = 50) -> list[
        dict[str, Any]]:
    return [r.to_dict() for r in read_failed(api_of(request).read_store(job), limit)]


@router.get("/jobs/{job}/dead", summary="The newest dead letters (clustersync dead JOB --json)")
def dead(request: Request, job: str, _caller: Reader, limit: Limit = 50) -> list[
        dict[str, Any]]:
    return [dead_letter_dict(letter)
            for letter in api_of(request).read_store(job).dead_letters(limit)]


@router.get("/jobs/{job}/settings",
            summary="The job's shared settings and their version (clustersync config get)")
def settings(request: Request, job: str, _caller: Reader) -> dict[str, Any]:
    store = api_of(request).read_store(job)
    current = SharedSettingsStore(store.client, store.keys).read()
    return {"version": current.version,
            "settings": {name: masked(name, value) for name, value in current.values.items()},
            "unreadable": sorted(current.unreadable)}


@router.get("/jobs/{job}/settings/history",
            summary="The newest changes of the shared settings, oldest first "
                    "(clustersync config history JOB --json)")
def settings_history(request: Request, job: str, _caller: Reader,
                     limit: Limit = 50) -> list[dict[str, Any]]:
    store = api_of(request).read_store(job)
    return shown_history(SharedSettingsStore(store.client, store.keys), limit)


@router.get("/audit", summary="The newest writes made through this API, and who made them")
def audit(request: Request, _caller: Reader, limit: Limit = 50) -> list[dict[str, Any]]:
    return api_of(request).tokens.audit(limit)
