"""``clustersync config``: a job's shared settings, which every node applies while it crawls
(store/shared_settings.py keeps them; live_settings.py says which keys may change live and
checks every value before anything is written). Values with a proxy's password are shown with
``***`` instead."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from ..config import JOB_NAME_RE, ConfigError, validate_settings_history
from ..live_settings import (
    UNSET,
    canonical_json,
    check_value,
    holds_mask,
    masked,
    parse_text,
    setting_for,
)
from ..store.errors import translate_errors
from ..store.keys import JobKeys
from ..store.shared_settings import SettingsChange, SharedSettingsStore
from .context import CliContext, pass_cli, reads_only
from .exit_codes import JobRefused
from .options import DEFAULT_LIMIT, json_option, settings_option
from .output import echo_json, when_iso
from .settings_files import read_settings_file, toml_text


@click.group("config")
def config() -> None:
    """A job's shared settings: every node applies a change within a second while it crawls.

    \b
    Settings that can change live: DOWNLOAD_DELAY, RANDOMIZE_DOWNLOAD_DELAY,
    CONCURRENT_REQUESTS, CONCURRENT_REQUESTS_PER_DOMAIN, CONCURRENT_REQUESTS_PER_IP,
    DOWNLOAD_TIMEOUT, USER_AGENT, DEFAULT_REQUEST_HEADERS, RETRY_ENABLED, RETRY_TIMES,
    RETRY_HTTP_CODES, AUTOTHROTTLE_*, CLOSESPIDER_*, CLUSTERSYNC_PROXY,
    CLUSTERSYNC_SITE_DELAYS, and every key the job's spider declares.

    Every change is checked first (a bad value changes nothing, exit code 2), makes one new
    version and one history record per key changed.
    """


def who() -> str:
    """``user@host`` of this command, for the history."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _settings_store(cli: CliContext, job: str | None) -> SharedSettingsStore:
    """The shared settings of JOB, which must exist (JobNotFound, exit 3)."""
    store = cli.existing_store(job)
    keep = validate_settings_history(cli.project.settings)
    return SharedSettingsStore(store.client, store.keys, keep)


def _is_job(cli: CliContext, name: str) -> bool:
    """``name`` names a job on the Redis (and no live setting: a setting name wins)."""
    if not JOB_NAME_RE.match(name) or _is_setting_name(name):
        return False
    client = cli.client()
    with translate_errors(client):
        return bool(client.exists(JobKeys(name).meta))


def _is_setting_name(name: str) -> bool:
    try:
        setting_for(name)
    except ConfigError:
        return False
    return True


def _declared(settings: SharedSettingsStore) -> dict[str, str]:
    return settings.declared_keys()


def _shown(key: str, value: Any) -> str:
    return canonical_json(masked(key, value)) if not isinstance(value, str) else str(
        masked(key, value))


def _apply(cli: CliContext, settings: SharedSettingsStore, changes: Mapping[str, Any],
           as_json: bool, expect_version: int | None = None) -> None:
    """Make ``changes`` (checked already) and say what happened."""
    before = settings.read().values
    change = settings.change(changes, who(), expect_version)
    job = settings.keys.job
    if change.verdict == "absent":
        cli.not_found(job)
    if change.verdict == "stale":
        raise JobRefused(f"the shared settings of job {job!r} changed meanwhile (now version "
                         f"{change.version}); nothing was changed: run the command again")
    if as_json:
        echo_json({"job": job, "verdict": change.verdict, "version": change.version,
                   "changed": list(change.changed)})
        return
    _describe(job, change, before, changes)


def _describe(job: str, change: SettingsChange, before: Mapping[str, Any],
              changes: Mapping[str, Any]) -> None:
    if change.verdict == "same":
        click.echo(f"job {job!r}: nothing changed, every value was so already (shared settings "
                   f"version {change.version})")
        return
    click.echo(f"job {job!r}: shared settings version {change.version}; the nodes apply it "
               "within a second")
    for key in change.changed:
        old = _shown(key, before[key]) if key in before else "unset"
        new = "unset" if changes[key] is UNSET else _shown(key, changes[key])
        click.echo(f"  {key} = {new}  (was {old})")


@config.command("get")
@click.argument("args", nargs=-1, metavar="[JOB] [KEY]")
@json_option("the settings (or the value)")
@settings_option
@pass_cli
@reads_only
def get(cli: CliContext, args: tuple[str, ...], as_json: bool) -> None:
    """The shared settings of JOB and their version, or the value of KEY.

    With one argument, it is JOB if a job of that name exists, else KEY. """
    if len(args) > 2:
        raise click.UsageError("config get takes [JOB] [KEY]")
    job, key = (args[0], args[1]) if len(args) == 2 else (
        (args[0], None) if args and _is_job(cli, args[0]) else (None, args[0] if args else None))
    current = _settings_store(cli, job).read()
    if key is not None:
        _get_one(key, current.values, as_json)
        return
    shown = {name: masked(name, value) for name, value in current.values.items()}
    if as_json:
        echo_json({"version": current.version, "settings": shown,
                   "unreadable": sorted(current.unreadable)})
        return
    click.echo(f"shared settings version {current.version}")
    for name in sorted(shown):
        click.echo(f"  {name} = {_shown(name, current.values[name])}")
    for name in sorted(current.unreadable):
        click.echo(f"  {name}: unreadable (not JSON; the nodes keep their last good value)")


def _get_one(key: str, values: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        echo_json({"key": key, "set": key in values,
                   "value": masked(key, values[key]) if key in values else None})
    elif key in values:
        click.echo(_shown(key, values[key]))
    else:
        click.echo(f"{key} is not shared: each node uses its own settings for it")


@config.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, metavar="[JOB] KEY VALUE [KEY VALUE]...")
@json_option("what changed")
@settings_option
@pass_cli
def set_(cli: CliContext, args: tuple[str, ...], as_json: bool) -> None:
    """Set shared settings of JOB, all or nothing, as one new version.

    JOB is the first argument when there is an odd number of them. VALUE is JSON when it
    parses as JSON, else read as Scrapy reads -s: true/false/1/0 for a flag, comma-separated
    for a list (RETRY_HTTP_CODES 500,502,503); a negative number is a value, not an option.
    A bad value, an unknown key or one that cannot
    change while Scrapy runs is refused (exit code 2) and nothing changes.
    """
    job, pairs = (args[0], args[1:]) if len(args) % 2 else (None, args)
    if not pairs:
        raise click.UsageError("config set needs KEY VALUE pairs")
    settings = _settings_store(cli, job)
    declared = _declared(settings)
    texts = dict(zip(pairs[::2], pairs[1::2], strict=True))
    changes = all_or_refused({key: (lambda k=key: parse_text(k, texts[k], declared))
                               for key in texts})
    _apply(cli, settings, changes, as_json)


def all_or_refused(checks: Mapping[str, Any]) -> dict[str, Any]:
    """Each key's checked value; one ConfigError naming every refusal if any (nothing is
    written then)."""
    values, refused = {}, []
    for key, check in checks.items():
        try:
            values[key] = check()
        except ConfigError as exc:
            refused.append(str(exc))
    if refused:
        raise ConfigError("nothing changed: " + "\n".join(refused))
    return values


@config.command("unset")
@click.argument("args", nargs=-1, metavar="[JOB] KEY...")
@json_option("what changed")
@settings_option
@pass_cli
def unset(cli: CliContext, args: tuple[str, ...], as_json: bool) -> None:
    """Unset shared settings of JOB: each node goes back to its own settings for them.

    The first argument is JOB when more follow and a job of that name exists."""
    job, keys = (args[0], args[1:]) if len(args) > 1 and _is_job(cli, args[0]) else (None, args)
    if not keys:
        raise click.UsageError("config unset needs the KEY to unset")
    settings = _settings_store(cli, job)
    declared = _declared(settings)
    current = settings.read().values
    for key in keys:
        if key not in current:  # a key once set stays unsettable, whatever it is now
            setting_for(key, declared)
    _apply(cli, settings, dict.fromkeys(keys, UNSET), as_json)


@config.command("history")
@click.argument("job", required=False)
@click.option("--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
              help="How many of the newest changes to show (oldest of them first).")
@json_option("the records")
@settings_option
@pass_cli
@reads_only
def history(cli: CliContext, job: str | None, limit: int, as_json: bool) -> None:
    """Every change of JOB's shared settings, oldest first: version, time (Redis's clock), who
    (user@host), key, old and new value. The job keeps the newest CLUSTERSYNC_SETTINGS_HISTORY
    (1000) records."""
    records = shown_history(_settings_store(cli, job), limit)
    if as_json:
        echo_json(records)
        return
    for r in records:
        old = "unset" if r["old"] is None else _shown(r["key"], r["old"])
        new = "unset" if r["new"] is None else _shown(r["key"], r["new"])
        click.echo(f"v{r.get('version')}  {r['at']}  {r.get('who')}  {r['key']}: {old} -> {new}")
    click.echo(f"{len(records)} change(s) shown")


def shown_history(settings: SharedSettingsStore, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` history records, oldest first, as ``history --json`` prints them
    (and the HTTP API): passwords masked, ``at`` the time in ISO 8601."""
    records = settings.history(limit)
    for record in records:
        key = str(record.get("key"))
        record["old"], record["new"] = masked(key, record.get("old")), masked(key, record.get(
            "new"))
        record["at"] = when_iso(record.get("ms"))
    return records


@config.command("dump")
@click.argument("job", required=False)
@json_option("the settings")
@settings_option
@pass_cli
@reads_only
def dump(cli: CliContext, job: str | None, as_json: bool) -> None:
    """JOB's shared settings as TOML (or JSON), a file `config load` takes back. Passwords are
    shown as ***; `load` of such a file keeps the password stored."""
    current = _settings_store(cli, job).read()
    shown = {name: masked(name, value) for name, value in current.values.items()}
    if as_json:
        echo_json(shown)
    else:
        click.echo(toml_text(shown, f"shared settings of job {cli.job_name(job)!r}, version "
                                    f"{current.version}"), nl=False)


@config.command("load")
@click.argument("args", nargs=-1, metavar="[JOB] FILE")
@click.option("--merge", is_flag=True,
              help="Keep the shared settings the file does not name (else they are unset).")
@json_option("what changed")
@settings_option
@pass_cli
def load(cli: CliContext, args: tuple[str, ...], merge: bool, as_json: bool) -> None:
    """Make FILE (TOML, or JSON: by its name's ending, else by its content) JOB's shared
    settings, all or nothing, as one new version. Settings the file does not name are unset,
    unless --merge. Every value is checked first: one bad key changes nothing (exit code 2)."""
    if not 1 <= len(args) <= 2:
        raise click.UsageError("config load takes [JOB] FILE")
    job, path = (args[0], args[1]) if len(args) == 2 else (None, args[0])
    table = read_settings_file(Path(path))
    settings = _settings_store(cli, job)
    declared = _declared(settings)
    current = settings.read()
    changes = all_or_refused({key: (lambda k=key: _loaded(k, table[k], current.values,
                                                           declared)) for key in table})
    if not merge:
        changes.update({key: UNSET for key in current.values if key not in table})
    _apply(cli, settings, changes, as_json, expect_version=current.version)


def _loaded(key: str, value: Any, current: Mapping[str, Any],
            declared: Mapping[str, str]) -> Any:
    """``value`` from a file, checked; a value as `dump` showed it (password masked) stands for
    the one stored."""
    if key in current and holds_mask(value) and masked(key, current[key]) == value:
        return current[key]
    checked = check_value(key, value, declared)
    if holds_mask(checked) and key in current:
        raise ConfigError(f"{key} holds a masked password (***) that is not the one stored: "
                          "give the password itself")
    return checked
