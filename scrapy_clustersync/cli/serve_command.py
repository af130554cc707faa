"""``clustersync serve``: the cluster over HTTP (scrapy_clustersync/api/; docs/api.md), on
uvicorn. Needs the ``api`` extra: ``pip install 'scrapy-clustersync[api]'``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..config import redact_url
from ..store.api_tokens import TokenStore
from .context import CliContext, pass_cli
from .exit_codes import USAGE
from .options import settings_option

if TYPE_CHECKING:
    from ..api.alert_routes import AlertOptions

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6810


def access_line(tokens: int, loopback: bool, where: str) -> str:
    """The one line serve says at start about who may call it."""
    if loopback and not tokens:
        return (f"clustersync serve: no token exists and {where} is a loopback address: "
                "requests need no token (`clustersync token add NAME --role R` changes that)")
    if not tokens:
        return (f"clustersync serve: {where} is not a loopback address, so every request needs "
                "a token, and none exists: `clustersync token add NAME --role R` makes one")
    return (f"clustersync serve: {tokens} token(s) exist: every request needs "
            "`Authorization: Bearer <secret>`")


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True,
              help="Address to listen on; beyond loopback every request needs a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on.")
@click.option("--ssl-certfile", type=click.Path(exists=True, dir_okay=False),
              help="Serve HTTPS with this certificate (PEM; the chain after it).")
@click.option("--ssl-keyfile", type=click.Path(exists=True, dir_okay=False),
              help="The certificate's private key (PEM).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="uvicorn's log level (info logs every request).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes answering requests (serve keeps no state: any number "
                   "agree).")
@click.option("--alerts", "alerts_path", type=click.Path(dir_okay=False),
              help="Alert rules (TOML; docs/api.md \"Alerts\"); the shipped defaults without.")
@click.option("--alert-webhook", metavar="URL",
              help="POST each alert's firing and resolving here (JSON); overrides the file's.")
@click.option("--alert-every", type=click.FloatRange(0, 3600), default=5.0, show_default=True,
              metavar="SECONDS",
              help="Evaluate the alert rules every SECONDS (0: no alerts).")
@click.option("--check-every", type=click.FloatRange(0), default=0.0, show_default=True,
              metavar="SECONDS",
              help="Run the consistency check of `clustersync check` on every job every "
                   "SECONDS and alert on its findings (0: never).")
@settings_option
@pass_cli
def serve(cli: CliContext, host: str, port: int, ssl_certfile: str | None,
          ssl_keyfile: str | None, log_level: str, workers: int, alerts_path: str | None,
          alert_webhook: str | None, alert_every: float, check_every: float) -> None:
    """Serve the REST API, the dashboard (/) and Prometheus metrics (/metrics) of every job on
    the Redis: reads and writes the same state as the other commands (docs/api.md)."""
    try:
        from ..api.api_context import ApiContext, is_loopback
        from ..api.web_app import ServeOptions, run_server
    except ImportError as exc:
        raise click.UsageError(f"serve needs the api extra ({exc.name} is missing): pip "
                               "install 'scrapy-clustersync[api]'") from None
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together")
    alerts = alert_options(alerts_path, alert_webhook, alert_every, check_every)
    client = cli.client()
    loopback = is_loopback(host)
    tokens = len(TokenStore(client).tokens())  # also: Redis answers, or exit 4 now
    scheme = "https" if ssl_certfile else "http"
    click.echo(access_line(tokens, loopback, host), err=True)
    click.echo(f"clustersync serve: {scheme}://{host}:{port}/ for {cli.where()}", err=True)
    reads, read_url = cli.read_client(), cli.read_url()
    if read_url is not None:
        click.echo(f"clustersync serve: reads from the replica at {redact_url(read_url)}; "
                   "writes go to the job's Redis", err=True)
    run_server(ApiContext(client, cli.project, loopback, reads), cli.redis_url(), ServeOptions(
        host, port, log_level, ssl_certfile, ssl_keyfile, workers, alerts), read_url)


def alert_options(path: str | None, webhook: str | None, every_s: float,
                  check_every_s: float) -> AlertOptions | None:
    """serve's alert options, their rules read and checked now: a file that does not fit ends
    serve with its one line (exit 2) before it listens."""
    from ..api.alert_routes import AlertOptions
    from ..api.alert_rules import AlertRulesError

    if webhook is not None and not webhook.startswith(("http://", "https://")):
        raise BadAlertRules("--alert-webhook must be an http:// or https:// URL")
    if not every_s:
        return None
    options = AlertOptions(path, webhook, every_s, check_every_s)
    try:
        rules = options.rules()
    except AlertRulesError as exc:
        raise BadAlertRules(str(exc)) from None
    click.echo(f"clustersync serve: {len(rules.rules)} alert rule(s) from {rules.origin}, "
               f"every {every_s:g} s" + ("" if webhook or rules.webhook else
                                         " (no webhook: shown at /api/alerts)"), err=True)
    return options


class BadAlertRules(click.ClickException):
    """The alert rules cannot be used (exit 2, one line)."""

    exit_code = USAGE
