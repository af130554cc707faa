"""``GET /api/alerts`` and the alerts' place in serve's application: the engine started with the
application and stopped with it (alert_engine.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request

from ..cli.check_commands import needs_a_person
from ..store import JobStore, StoreError, StoreUnavailable
from ..store.alert_state import AlertStateStore
from .alert_engine import EVERY_S, AlertEngine, iso_ms
from .alert_rules import RuleSet, load_rules
from .api_context import ApiContext
from .auth import Caller, api_of, need
from .webhook import Webhook

router = APIRouter(prefix="/api")
Reader = Annotated[Caller, Depends(need("read"))]
#: jobs whose needs_attention lines are read at most (as many as the metrics read)
ATTENTION_JOBS = 50


@dataclass(frozen=True)
class AlertOptions:
    """serve's alert options: the rules file (None: the defaults), the webhook (None: the
    file's, if it names one), how often the rules are evaluated and the consistency check runs
    (0: never)."""

    rules_path: str | None = None
    webhook: str | None = None
    every_s: float = EVERY_S
    check_every_s: float = 0.0

    def rules(self) -> RuleSet:
        """The rules; AlertRulesError (one line) for a file that does not fit."""
        return load_rules(self.rules_path)

    def to_dict(self) -> dict[str, Any]:
        return {"rules_path": self.rules_path, "webhook": self.webhook,
                "every_s": self.every_s, "check_every_s": self.check_every_s}


def install_alerts(app: FastAPI, api: ApiContext, options: AlertOptions | None) -> None:
    """Add ``GET /api/alerts`` to ``app``; with ``options``, evaluate the rules while it runs."""
    app.include_router(router)
    app.state.alert_rules = None
    if options is None:
        return
    rules = options.rules()
    app.state.alert_rules = rules
    url = options.webhook or rules.webhook
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_: FastAPI) -> AsyncIterator[Any]:
        webhook = Webhook(url) if url else None
        # a list of jobs of its own: the engine's first read (before any job exists) must not
        # leave the API's list empty for JOB_NAMES_TTL_S
        own = ApiContext(api.client, api.project, api.loopback)
        engine = AlertEngine(api.client, own.job_names, rules, webhook, options.every_s,
                             options.check_every_s)
        engine.start()
        try:
            async with outer(app_) as state:
                yield state
        finally:
            engine.stop()
            if webhook is not None:
                webhook.stop()

    app.router.lifespan_context = lifespan


@router.get("/alerts", summary="The alerts firing now, the newest transitions, the rules, and "
                               "what needs a person (status --check of every job)")
def alerts(request: Request, _caller: Reader,
           limit: Annotated[int, Query(ge=1, le=200, description="transitions, newest "
                                                               "first")] = 20) -> dict[str, Any]:
    api = api_of(request)
    state = AlertStateStore(api.client)
    rules: RuleSet | None = request.app.state.alert_rules
    firing = [{"id": key, **record, "since": iso_ms(int(record.get("since_ms", 0)))}
              for key, record in sorted(state.firing().items(),
                                        key=lambda item: item[1].get("since_ms", 0))]
    return {"firing": firing, "recent": state.recent(limit),
            "rules": [rule.to_dict() for rule in rules.rules] if rules else [],
            "evaluated": rules is not None,
            "needs_attention": attention(api)}


def attention(api: ApiContext) -> list[dict[str, str]]:
    """What needs a person, a ``{"job", "alert"}`` each: the lines ``status --check`` prints,
    of every job the metrics read."""
    found = []
    for name in api.job_names()[:ATTENTION_JOBS]:
        store = JobStore(api.client, name, node_id="cli", writes_seen=None)
        try:
            report = store.status()
        except StoreUnavailable:
            raise
        except StoreError as exc:  # keys this version cannot read: that needs a person too
            found.append({"job": name, "alert": f"the job cannot be read: {exc}"})
            continue
        if report.exists:
            found += [{"job": name, "alert": line} for line in needs_a_person(store, report)]
    return found
