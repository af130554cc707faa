"""The files of ``clustersync config dump`` and ``load``: TOML (written here: the standard library
reads TOML but does not write it) or JSON, a table of setting names to values."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_text(settings: Mapping[str, Any], header: str = "") -> str:
    """``settings`` as a TOML document, a line per key (tables and arrays inline), keys sorted;
    ConfigError for a value TOML cannot hold (null, NaN): dump it with --json instead."""
    lines = [f"# {line}" for line in header.splitlines()]
    for name in sorted(settings):
        lines.append(f"{_key(name)} = {_value(name, settings[name])}")
    return "\n".join(lines) + "\n"


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(name: str, value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_value(name, item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(name, v)}" for k, v in value.items()) + "}"
    return _scalar(name, value)


def _scalar(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{name} holds {value!r}, which TOML cannot write: use --json")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are all TOML escapes too
    raise ConfigError(f"{name} holds {json.dumps(value)}, which TOML cannot write: use --json")


def read_settings_file(path: Path) -> dict[str, Any]:
    """The table of settings in ``path``: JSON if its name ends in .json, TOML if in .toml,
    else whichever it parses as; ConfigError saying why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    suffix = path.suffix.lower()
    readers = {".json": [_json], ".toml": [_toml]}.get(suffix, [_json, _toml])
    errors = []
    for reader in readers:
        try:
            table = reader(text)
        except ValueError as exc:
            errors.append(f"{reader.__name__.strip('_').upper()}: {exc}")
            continue
        if not isinstance(table, dict):
            raise ConfigError(f"{path} holds no table of settings (names to values)")
        return table
    raise ConfigError(f"{path} is neither valid JSON nor TOML ({'; '.join(errors)})")


def _json(text: str) -> Any:
    return json.loads(text)


def _toml(text: str) -> Any:
    return tomllib.loads(text)
