"""The HTTP API's writes: each does what the ``clustersync`` command of the same name does,
through the same function, and records who did it (the token's name, or "local") in the audit
list; a shared settings change also in the settings history (``who``: ``api:<name>``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request

from ..cli.config_commands import all_or_refused
from ..cli.control_commands import ControlRefused, change_job_control
from ..cli.job_commands import restart_refusal
from ..cli.seed_commands import write_seeds
from ..cli.seed_urls import SEED_BATCH, BadSeed, SeedEncoder, SeedUrls, crawlable_schemes
from ..config import JOB_NAME_RE
from ..live_settings import UNSET, check_value, setting_for
from ..store import JobStore
from ..store.consistency import check_job
from ..store.dead_requeue import requeue_dead_letters
from ..store.shared_settings import SharedSettingsStore
from .api_context import ApiContext, not_found
from .api_errors import ApiError
from .auth import Caller, api_of, need
from .models import CheckBody, RequeueBody, RestartBody, SeedBody, SettingsBody

router = APIRouter(prefix="/api")
Reader = Annotated[Caller, Depends(need("read"))]
Operator = Annotated[Caller, Depends(need("operator"))]
Admin = Annotated[Caller, Depends(need("admin"))]


def _control(request: Request, job: str, caller: Caller, action: str) -> dict[str, Any]:
    api = api_of(request)
    store = api.store(job)
    try:
        change = change_job_control(store, action)
    except ControlRefused as exc:
        raise (not_found(job) if exc.absent else ApiError(409, str(exc))) from None
    answer = {"job": job, "action": action, "verdict": change.verdict,
              "before": change.before, "after": change.after}
    api.tokens.record(caller.name, action, job, answer)
    return answer


@router.post("/jobs/{job}/pause", summary="Pause the job on every node within a second")
def pause(request: Request, job: str, caller: Operator) -> dict[str, Any]:
    return _control(request, job, caller, "pause")


@router.post("/jobs/{job}/resume", summary="Resume a paused or stopped job")
def resume(request: Request, job: str, caller: Operator) -> dict[str, Any]:
    return _control(request, job, caller, "resume")


@router.post("/jobs/{job}/stop",
             summary="Stop the job: every node finishes what is under way and closes")
def stop(request: Request, job: str, caller: Operator) -> dict[str, Any]:
    return _control(request, job, caller, "stop")


@router.post("/jobs/{job}/restart", summary="Crawl a finished or stopped job again")
def restart(request: Request, job: str, caller: Admin,
            body: Annotated[RestartBody | None, Body()] = None) -> dict[str, Any]:
    options = body or RestartBody()
    api = api_of(request)
    store = api.store(job)
    result = store.restart(force=options.force, forget_seen=options.forget_seen)
    if not result.done:
        raise ApiError(409, restart_refusal(store, result))
    answer = {"job": job, "restarted": True, "forgot_seen": options.forget_seen,
              "resumed_from": result.resumed or None}
    api.tokens.record(caller.name, "restart", job, answer)
    return answer


@router.post("/jobs/{job}/seed", summary="Add URLs to the job's queue (clustersync seed)")
def seed(request: Request, job: str, body: SeedBody, caller: Operator) -> dict[str, Any]:
    api = api_of(request)
    seeds = SeedUrls([("urls", list(enumerate(body.urls, 1)))])
    try:
        seeds.check(crawlable_schemes(api.settings))
    except BadSeed as exc:
        raise ApiError(422, str(exc)) from None
    store = _seed_store(api, job, body.create)
    unchecked = None
    if body.callback and api.project.in_project():
        unchecked = _check_callback(api, job, body.callback)
    encoder = SeedEncoder(api.fingerprinter(), body.priority, body.callback)
    batches = (encoder.ops_for(body.urls[i:i + SEED_BATCH])
               for i in range(0, len(body.urls), SEED_BATCH))
    pushed, filtered = write_seeds(store, batches)
    answer: dict[str, Any] = {"job": job, "seeded": pushed, "already_seen": filtered}
    if unchecked:
        answer["callback_not_checked"] = unchecked
    api.tokens.record(caller.name, "seed", job, {**answer, "urls": len(body.urls)})
    return answer


def _seed_store(api: ApiContext, job: str, create: bool) -> JobStore:
    if not create:
        return api.store(job)
    if not JOB_NAME_RE.match(job):
        api.store(job)  # raises 422 for the name
    return JobStore(api.client, job, node_id="cli", dedup=api.project.dedup(),
                    writes_seen=None)


def _check_callback(api: ApiContext, job: str, callback: str) -> str | None:
    """None if ``callback`` is a method of the job's spider, why it could not be checked if the
    spider cannot be told; ApiError 422 if it is no method of that spider."""
    import click

    from ..cli.seed_callbacks import check_callback

    try:
        return check_callback(api.settings, job, callback)
    except click.BadParameter as exc:
        raise ApiError(422, exc.format_message()) from None


@router.put("/jobs/{job}/settings",
            summary="Change shared settings, all or nothing, as one new version")
def change_settings(request: Request, job: str, body: SettingsBody,
                    caller: Admin) -> dict[str, Any]:
    api = api_of(request)
    store = api.store(job)
    settings = SharedSettingsStore(store.client, store.keys, api.history_keep())
    declared = settings.declared_keys()
    current = settings.read().values
    checks: dict[str, Any] = {key: (lambda k=key: check_value(k, body.set[k], declared))
                              for key in body.set}
    checks.update({key: (lambda k=key: UNSET if k in current else _unsettable(k, declared))
                   for key in body.unset})
    changes = all_or_refused(checks)
    change = settings.change(changes, caller.who, body.expect_version)
    if change.verdict == "absent":
        raise not_found(job)
    if change.verdict == "stale":
        raise ApiError(409, f"the shared settings of job {job!r} are at version "
                            f"{change.version}, not {body.expect_version}: nothing changed")
    answer = {"job": job, "verdict": change.verdict, "version": change.version,
              "changed": list(change.changed)}
    api.tokens.record(caller.name, "settings", job, answer)
    return answer


def _unsettable(key: str, declared: dict[str, str]) -> Any:
    """UNSET for a key not set now, if it is a live setting at all (else its refusal)."""
    setting_for(key, declared)
    return UNSET


@router.post("/jobs/{job}/check",
             summary="Verify the job's invariants, and mend what can be mended with repair "
                     "(clustersync check)")
def check(request: Request, job: str, caller: Reader,
          body: Annotated[CheckBody | None, Body()] = None) -> dict[str, Any]:
    options = body or CheckBody()
    if options.repair:
        caller.require("operator", "check with repair")
    api = api_of(request)
    findings = check_job(api.store(job), repair=options.repair, deep=options.deep)
    left = sum(1 for f in findings if not f.action)
    if options.repair:
        api.tokens.record(caller.name, "repair", job,
                          {"mended": len(findings) - left, "left": left})
    return {"job": job, "findings": [f.to_dict() for f in findings], "left": left}


@router.post("/jobs/{job}/dead/requeue",
             summary="Put dead letters back into the queue, each once (clustersync dead "
                     "--requeue)")
def requeue(request: Request, job: str, body: RequeueBody, caller: Operator) -> dict[str, Any]:
    api = api_of(request)
    result = requeue_dead_letters(api.store(job), None if body.all else body.ids)
    answer = {"job": job, **result.to_dict()}
    api.tokens.record(caller.name, "requeue", job, {"requeued": result.requeued})
    return answer
