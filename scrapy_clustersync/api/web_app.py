"""The FastAPI application of ``clustersync serve``: the REST API under ``/api``, its OpenAPI
document at ``/api/openapi.json``, the dashboard at ``/`` and the metrics at ``/metrics``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from typing import Annotated

from fastapi import Depends, FastAPI, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from scrapy.settings import SETTINGS_PRIORITIES

from .. import __version__
from . import node_routes, read_routes, write_routes
from .alert_routes import AlertOptions, install_alerts
from .api_context import ApiContext
from .api_errors import install_error_handlers
from .auth import Caller, need
from .metrics import ClusterCollector


def dashboard_html() -> str:
    """The dashboard: one page, its script and style inline (no build step, nothing fetched
    from elsewhere)."""
    return resources.files(__package__).joinpath("dashboard.html").read_text("utf-8")


def create_app(api: ApiContext, alerts: AlertOptions | None = None) -> FastAPI:
    """The application serving ``api``'s Redis; with ``alerts``, evaluating those alert rules
    while it runs (alert_routes.py)."""
    app = FastAPI(title="scrapy-clustersync", version=__version__,
                  description="See and steer the jobs of a scrapy-clustersync cluster "
                              "(docs/api.md).",
                  openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.api = api
    install_error_handlers(app)
    app.include_router(read_routes.router)
    app.include_router(write_routes.router)
    app.include_router(node_routes.router)  # the HTTP workers' protocol
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(api.reader, api.job_names))
    install_alerts(app, api, alerts)
    page = dashboard_html()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> str:
        return page

    @app.get("/metrics", summary="Prometheus metrics, read from Redis at each scrape")
    def metrics(_caller: Annotated[Caller, Depends(need("read"))]) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app



#: how each worker process of ``serve --workers N`` learns what serve was given: JSON in the
#: environment it inherits (not a CLUSTERSYNC_ name: those are settings)
WORKER_ENV = "SCRAPY_CLUSTERSYNC_SERVE"


def app_of_worker() -> FastAPI:
    """The application of one worker process (uvicorn's factory), from WORKER_ENV."""
    from ..cli.project import ProjectContext
    from ..store import make_client

    given = json.loads(os.environ[WORKER_ENV])
    project = ProjectContext(redis_url_flag=given["redis_url"],
                             settings_module=given["settings_module"],
                             overrides=dict(given["overrides"]))
    alerts = AlertOptions(**given["alerts"]) if given.get("alerts") else None
    client = make_client(given["redis_url"], project.tls(given["redis_url"]))
    read_url = given.get("read_url")
    reads = make_client(read_url, project.tls(read_url)) if read_url else None
    return create_app(ApiContext(client, project, given["loopback"], reads), alerts)


def run_server(api: ApiContext, redis_url: str, options: ServeOptions,
               read_url: str | None = None) -> None:
    """Serve ``api`` on uvicorn until stopped (SIGINT, SIGTERM): in this process, or with
    ``options.workers`` > 1 in that many processes, each with clients of its own."""
    import uvicorn

    if options.workers <= 1:
        uvicorn.run(create_app(api, options.alerts), host=options.host, port=options.port,
                    log_level=options.log_level, ssl_certfile=options.ssl_certfile,
                    ssl_keyfile=options.ssl_keyfile)
        return
    os.environ[WORKER_ENV] = json.dumps({
        "redis_url": redis_url, "read_url": read_url,
        "settings_module": api.project.settings_module,
        "overrides": given_settings(api), "loopback": api.loopback,
        "alerts": options.alerts.to_dict() if options.alerts else None}, default=str)
    uvicorn.run(f"{__name__}:app_of_worker", factory=True, workers=options.workers,
                host=options.host, port=options.port, log_level=options.log_level,
                ssl_certfile=options.ssl_certfile, ssl_keyfile=options.ssl_keyfile)


def given_settings(api: ApiContext) -> dict[str, object]:
    """The settings given on the command line (``-s``), which a worker applies on top of the
    project's: ``clustersync``'s own, and those ``scrapy clustersync`` handed in with its
    settings."""
    given: dict[str, object] = {}
    if api.project.base is not None:
        cmdline = SETTINGS_PRIORITIES["cmdline"]
        given.update({name: value.value for name, value in api.project.base.attributes.items()
                      if value.priority == cmdline})
    return {**given, **api.project.overrides}


@dataclass(frozen=True)
class ServeOptions:
    """How ``clustersync serve`` listens (its options)."""

    host: str
    port: int
    log_level: str = "info"
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    workers: int = 1
    #: the alert rules evaluated, and how (None: none)
    alerts: AlertOptions | None = None
