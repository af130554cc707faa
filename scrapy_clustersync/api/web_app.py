"""The FastAPI application of ``clustersync serve``: the REST API under ``/api``, its OpenAPI
document at ``/api/openapi.json``, the dashboard at ``/`` and the metrics at ``/metrics``."""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import Depends, FastAPI, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .. import __version__
from . import read_routes, write_routes
from .api_context import ApiContext
from .api_errors import install_error_handlers
from .auth import Caller, need
from .metrics import ClusterCollector


def dashboard_html() -> str:
    """The dashboard: one page, its script and style inline (no build step, nothing fetched
    from elsewhere)."""
    return resources.files(__package__).joinpath("dashboard.html").read_text("utf-8")


def create_app(api: ApiContext) -> FastAPI:
    """The application serving ``api``'s Redis."""
    app = FastAPI(title="scrapy-clustersync", version=__version__,
                  description="See and steer the jobs of a scrapy-clustersync cluster "
                              "(docs/api.md).",
                  openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.api = api
    install_error_handlers(app)
    app.include_router(read_routes.router)
    app.include_router(write_routes.router)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(api.client, api.job_names))
    page = dashboard_html()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> str:
        return page

    @app.get("/metrics", summary="Prometheus metrics, read from Redis at each scrape")
    def metrics(_caller: Annotated[Caller, Depends(need("read"))]) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def run_server(api: ApiContext, host: str, port: int, log_level: str,
               ssl_certfile: str | None = None, ssl_keyfile: str | None = None) -> None:
    """Serve ``api`` on uvicorn until stopped (SIGINT, SIGTERM); HTTPS with a certificate."""
    import uvicorn

    uvicorn.run(create_app(api), host=host, port=port, log_level=log_level,
                ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile)
