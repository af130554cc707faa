"""The settings a job shares in Redis and its nodes apply while Scrapy runs: which ones may
change live, the type and range of each, and how a value is read and checked.

Both sides use it: ``clustersync config`` checks a value before it writes it, and a node checks
what it reads back before it applies it (a value another program wrote may be anything). A
spider may declare live keys of its own with a type (``DECLARED_TYPES``); the nodes write those
declarations to Redis, and the checks here take them as ``declared`` (key -> type name).

Every refusal is a ``LiveSettingError`` whose message names the key, the value and what the key
accepts. A key that is no live setting is refused as unknown (with the closest name) or, if it
is a Scrapy or clustersync setting that is read once at start-up, as one that cannot change
while Scrapy runs. Passwords in URLs never appear in a message (``masked``).
"""

from __future__ import annotations

import difflib
import enum
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from .config import DEFAULTS, ConfigError
from .url_secrets import MASK, redact_url

#: the type names a spider may declare its own live keys with
DECLARED_TYPES = ("str", "int", "float", "bool", "list", "dict")
#: the proxy rule's key; its URLs are masked with url_secrets.redact_url when shown
PROXY_KEY = "CLUSTERSYNC_PROXY"
PROXY_SCHEMES = ("http", "https")
#: the password of a URL's userinfo, and a query value, wherever they appear in a text
_USERINFO = re.compile(r"(://[^:/?#@\s\"]*:)[^@/?#\s\"]*@")
_PROXY_PASSWORD = re.compile(r":[^:@/?#\s\",]*@")
_QUERY_VALUE = re.compile(r"([?&][^=&#\s\"]+=)[^&#\s\"]*")
#: how close a name must be to be offered as "did you mean" (difflib's ratio, 0-1)
CLOSE_ENOUGH = 0.6


class Unset(enum.Enum):
    """The type of ``UNSET``."""

    UNSET = "UNSET"


#: a change's value that unsets the key: the node goes back to its own settings for it
UNSET = Unset.UNSET


class LiveSettingError(ConfigError):
    """A shared setting refused: unknown, not changeable live, or a bad value. ``key`` is the
    setting; the message says what it accepts (the CLI exits with its usage code, 2)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class _Refused(ValueError):
    """A checker's refusal; the caller adds the key, value and what it accepts."""


Checker = Callable[[Any], Any]


@dataclass(frozen=True)
class LiveSetting:
    """One key that may change live: ``kind`` says how CLI text is read ("str", "int",
    "float", "bool", "list", "dict", "int-list", "proxy"), ``accepts`` what it takes, in words,
    and ``check`` returns the value in canonical form or raises ``_Refused``."""

    name: str
    kind: str
    accepts: str
    check: Checker


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(kind: type, minimum: float, above: bool = False) -> Checker:
    """A checker of an int or a float >= ``minimum`` (> with ``above``); a whole float passes
    as an int (TOML writes 8.0 as a float)."""
    def check(value: Any) -> Any:
        if not _is_number(value) or not math.isfinite(value):
            raise _Refused("not a number")
        if kind is int:
            if value != int(value):
                raise _Refused("not a whole number")
            value = int(value)
        else:
            value = float(value)
        if value < minimum or (above and value == minimum):
            raise _Refused("out of range")
        return value
    return check


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _Refused("not true or false")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Refused("not a string")
    return value


def _any_list(value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise _Refused("not a list")
    return list(value)


def _any_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Refused("not a table of names to values")
    return dict(value)


def _int_list(low: int, high: int) -> Checker:
    each = _number(int, low)

    def check(value: Any) -> list[int]:
        items = [each(item) for item in _any_list(value)]
        if any(item > high for item in items):
            raise _Refused("out of range")
        return items
    return check


def _dict_of(check_value: Checker) -> Checker:
    def check(value: Any) -> dict[str, Any]:
        table = _any_dict(value)
        if any(not name for name in table):
            raise _Refused("an empty name")
        return {name: check_value(item) for name, item in table.items()}
    return check


def _proxy_url(value: Any) -> str:
    url = _text(value)
    try:
        parts = urlsplit(url)
        ok = parts.scheme in PROXY_SCHEMES and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # a bad port or IPv6 literal
        ok = False
    if not ok:
        raise _Refused("not a proxy URL")
    return url


def _proxy_rule(value: Any) -> Any:
    if isinstance(value, str):
        return _proxy_url(value)
    if isinstance(value, (list, tuple)):
        if not value:
            raise _Refused("an empty list")
        return [_proxy_url(item) for item in value]
    return _dict_of(_proxy_url)(value)


def _live(name: str, kind: str, accepts: str, check: Checker) -> LiveSetting:
    return LiveSetting(name, kind, accepts, check)


_SECONDS = "a number of seconds >= 0 (e.g. 0.5)"
_COUNT = "a whole number >= 0 (0 = no limit)"
_BOOL = "true or false (also 1 or 0)"
_SETTINGS = [
    _live("DOWNLOAD_DELAY", "float", _SECONDS, _number(float, 0)),
    _live("RANDOMIZE_DOWNLOAD_DELAY", "bool", _BOOL, _boolean),
    _live("CONCURRENT_REQUESTS", "int", "a whole number >= 1", _number(int, 1)),
    _live("CONCURRENT_REQUESTS_PER_DOMAIN", "int", "a whole number >= 1", _number(int, 1)),
    _live("CONCURRENT_REQUESTS_PER_IP", "int", "a whole number >= 0 (0 = per domain instead)",
          _number(int, 0)),
    _live("DOWNLOAD_TIMEOUT", "float", "a number of seconds > 0", _number(float, 0, above=True)),
    _live("USER_AGENT", "str", "a string", _text),
    _live("DEFAULT_REQUEST_HEADERS", "dict", 'a JSON object of header names to strings, e.g. '
          '{"Accept-Language": "en"}', _dict_of(_text)),
    _live("RETRY_ENABLED", "bool", _BOOL, _boolean),
    _live("RETRY_TIMES", "int", "a whole number >= 0", _number(int, 0)),
    _live("RETRY_HTTP_CODES", "int-list", "a list of HTTP status codes (100-599), e.g. "
          "500,502,503 or [500, 502]", _int_list(100, 599)),
    _live("AUTOTHROTTLE_ENABLED", "bool", _BOOL, _boolean),
    _live("AUTOTHROTTLE_START_DELAY", "float", _SECONDS, _number(float, 0)),
    _live("AUTOTHROTTLE_MAX_DELAY", "float", _SECONDS, _number(float, 0)),
    _live("AUTOTHROTTLE_TARGET_CONCURRENCY", "float", "a number > 0 (e.g. 1.0)",
          _number(float, 0, above=True)),
    _live("AUTOTHROTTLE_DEBUG", "bool", _BOOL, _boolean),
    _live("CLOSESPIDER_PAGECOUNT", "int", _COUNT, _number(int, 0)),
    _live("CLOSESPIDER_PAGECOUNT_NO_ITEM", "int", _COUNT, _number(int, 0)),
    _live("CLOSESPIDER_ITEMCOUNT", "int", _COUNT, _number(int, 0)),
    _live("CLOSESPIDER_ERRORCOUNT", "int", _COUNT, _number(int, 0)),
    _live("CLOSESPIDER_TIMEOUT", "float", "a number of seconds >= 0 (0 = no limit)",
          _number(float, 0)),
    _live("CLOSESPIDER_TIMEOUT_NO_ITEM", "float", "a number of seconds >= 0 (0 = no limit)",
          _number(float, 0)),
    _live(PROXY_KEY, "proxy", "one proxy URL (http://[user:password@]host:port), a list of "
          "them to rotate, or a JSON object of sites to proxy URLs", _proxy_rule),
    _live("CLUSTERSYNC_SITE_DELAYS", "dict", 'a JSON object of sites to seconds >= 0, e.g. '
          '{"example.com": 2.0}', _dict_of(_number(float, 0))),
]
#: every setting that may change while Scrapy runs, by name
LIVE_SETTINGS: Mapping[str, LiveSetting] = {setting.name: setting for setting in _SETTINGS}

_DECLARED: Mapping[str, tuple[str, Checker]] = {
    "str": ("a string", _text),
    "int": ("a whole number", _number(int, -math.inf)),
    "float": ("a number", _number(float, -math.inf)),
    "bool": (_BOOL, _boolean),
    "list": ("a list (JSON, or comma-separated)", _any_list),
    "dict": ("a JSON object", _any_dict),
}


@cache
def startup_only_settings() -> frozenset[str]:
    """Scrapy's and clustersync's settings that are read once, when a node starts."""
    from scrapy.settings import default_settings

    scrapy_names = {name for name in dir(default_settings) if name.isupper()}
    return frozenset((scrapy_names | set(DEFAULTS)) - set(LIVE_SETTINGS))


def setting_for(key: str, declared: Mapping[str, str] | None = None) -> LiveSetting:
    """The live setting ``key`` is: one of LIVE_SETTINGS, or one the spider declares
    (``declared``: key -> type name); LiveSettingError if it is none, saying whether it is
    a setting read at start-up only or unknown (with the closest live name)."""
    if key in LIVE_SETTINGS:
        return LIVE_SETTINGS[key]
    if key in startup_only_settings():
        raise LiveSettingError(key, (
            f"{key} cannot change while Scrapy runs: it is read once, when a node starts; set "
            "it in the project's settings.py (or with -s) and restart the nodes"))
    type_name = (declared or {}).get(key)
    if type_name is None:
        raise LiveSettingError(key, _unknown_message(key, declared or {}))
    if type_name not in _DECLARED:
        raise LiveSettingError(key, (
            f"{key} is declared by the spider with type {type_name!r}, which is none of "
            f"{', '.join(DECLARED_TYPES)}: fix the spider's declaration"))
    accepts, check = _DECLARED[type_name]
    return LiveSetting(key, type_name, accepts, check)


def _unknown_message(key: str, declared: Mapping[str, str]) -> str:
    names: Iterable[str] = [*LIVE_SETTINGS, *declared]
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=CLOSE_ENOUGH)
    if not close:
        close = difflib.get_close_matches(key.upper(), list(names), n=1, cutoff=CLOSE_ENOUGH)
    hint = f"; did you mean {close[0]}?" if close else (
        "; `clustersync config --help` lists the settings that can change live")
    return (f"unknown setting {key!r}: it is neither a setting that can change while Scrapy "
            f"runs nor one the spider declares{hint}")


def check_value(key: str, value: Any, declared: Mapping[str, str] | None = None) -> Any:
    """``value`` (typed: from a TOML or JSON file, or read back from Redis) in canonical form
    for ``key``; LiveSettingError naming the key, the value and what it accepts."""
    setting = setting_for(key, declared)
    try:
        return setting.check(value)
    except _Refused as refused:
        raise _bad_value(setting, value, str(refused)) from None


def parse_text(key: str, text: str, declared: Mapping[str, str] | None = None) -> Any:
    """The value of ``key`` given as command-line text, in canonical form: JSON when it parses
    (a string key takes the text itself unless it is a JSON string), else Scrapy's conventions:
    true/false/1/0 for a bool, comma-separated for a list (as ``Settings.getlist``).
    LiveSettingError as ``check_value``."""
    setting = setting_for(key, declared)
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = _scrapy_text(setting.kind, text)
    else:
        if setting.kind == "str" and not isinstance(value, str):
            value = text
        elif setting.kind in ("list", "int-list") and not isinstance(value, list):
            value = _scrapy_text(setting.kind, text)  # "500" is a list of one, as getlist
    try:
        return setting.check(value)
    except _Refused as refused:
        raise _bad_value(setting, text, str(refused)) from None


def _scrapy_text(kind: str, text: str) -> Any:
    """Text that is no JSON, read as Scrapy reads a setting of ``kind`` given with -s."""
    if kind == "bool" and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    if kind in ("list", "int-list") or (kind == "proxy" and "," in text):
        parts = [part.strip() for part in text.split(",") if part.strip()]
        return [_int_or_text(part) for part in parts] if kind == "int-list" else parts
    return text  # a str (or proxy URL) as given; any other kind refuses it as it is


def _int_or_text(part: str) -> Any:
    try:
        return int(part)
    except ValueError:
        return part


def _bad_value(setting: LiveSetting, value: Any, reason: str) -> LiveSettingError:
    shown = value if isinstance(value, str) else canonical_json(value, strict=False)
    shown = masked_text(setting.name, shown)
    return LiveSettingError(setting.name, (
        f"{setting.name} = {shown} is refused ({reason}): {setting.name} accepts "
        f"{setting.accepts}"))


def canonical_json(value: Any, strict: bool = True) -> str:
    """The one JSON text of ``value`` that Redis stores (keys sorted, no spaces), so that
    setting a key to the value it holds is seen as no change. ``strict=False`` writes what
    JSON cannot hold (NaN, objects) somehow, for messages."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=not strict, default=None if strict else repr)


def masked(key: str, value: Any) -> Any:
    """``value`` with the password of every URL in it replaced by ``***`` (the proxy rule's
    URLs fully redacted, url_secrets.redact_url), for printing."""
    if isinstance(value, str):
        return redact_url(value) if key == PROXY_KEY else masked_text(key, value)
    if isinstance(value, list):
        return [masked(key, item) for item in value]
    if isinstance(value, dict):
        return {name: masked(key, item) for name, item in value.items()}
    return value


def masked_text(key: str, text: str) -> str:
    """``text`` (a value, or its JSON) with URL passwords masked, as ``masked``."""
    if key == PROXY_KEY:  # also a URL given without its scheme (refused, but shown)
        return _QUERY_VALUE.sub(rf"\g<1>{MASK}", _PROXY_PASSWORD.sub(f":{MASK}@", text))
    return _USERINFO.sub(rf"\g<1>{MASK}@", text) if "://" in text else text


def holds_mask(value: Any) -> bool:
    """``value`` holds a masked password (``***``), as ``config dump`` prints one."""
    return MASK in canonical_json(value, strict=False)

