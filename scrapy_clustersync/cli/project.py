"""The Scrapy project around the ``clustersync`` command: its settings, Redis URL, job and
request fingerprinter, found as ``scrapy`` commands find them.

Settings: the project of the current directory (``scrapy.cfg``, found as Scrapy finds it, or
``SCRAPY_SETTINGS_MODULE``), or the module of ``--settings``, then ``-s NAME=VALUE`` on top.
The Redis URL, first given wins: ``--redis-url``, ``-s CLUSTERSYNC_REDIS_URL=...``, the
environment variable ``CLUSTERSYNC_REDIS_URL``, the project's ``CLUSTERSYNC_REDIS_URL``. The
URL that commands which only read may read from (a replica near this machine), found the same
way: ``--read-url``, ``-s CLUSTERSYNC_READ_URL=...``, the environment, the project.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings, inside_project

from ..config import (
    DEFAULTS,
    ConfigError,
    DedupSettings,
    TlsOptions,
    validate_job_name,
    validate_redis_url,
)
from ..setting_names import PREFIX, check_setting_names, check_settings_object

if TYPE_CHECKING:
    from scrapy.utils.request import RequestFingerprinterProtocol

URL_SETTING = "CLUSTERSYNC_REDIS_URL"
READ_URL_SETTING = "CLUSTERSYNC_READ_URL"
JOB_SETTING = "CLUSTERSYNC_JOB"


class NoRedisGiven(ConfigError):
    """No Redis URL in any of the places the command looks."""


class NoJobGiven(ConfigError):
    """No JOB argument, no ``CLUSTERSYNC_JOB`` in the project's settings, and not exactly one
    job on the Redis."""


@dataclass
class ProjectContext:
    """What one ``clustersync`` run was given: options, and the settings they lead to.

    ``base``: settings already built by ``scrapy clustersync`` (project and ``-s`` applied);
    None for the ``clustersync`` command, which builds them itself on first use.
    """

    redis_url_flag: str | None = None
    read_url_flag: str | None = None
    settings_module: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    base: Settings | None = None
    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        """The project's settings with ``--settings`` and ``-s`` applied (built once)."""
        if self._settings is None:
            self._settings = self._build_settings()
        return self._settings

    def _build_settings(self) -> Settings:
        if self.settings_module:
            settings = self.base.copy() if self.base is not None else Settings()
            settings.setmodule(self.settings_module, priority="project")
        elif self.base is not None:
            settings = self.base
        else:
            settings = get_project_settings()
        settings.setdict(self.overrides, priority="cmdline")
        check_settings_object(settings)
        return settings

    def in_project(self) -> bool:
        """True when the settings come from a project or a settings module, not Scrapy's
        defaults alone."""
        return bool(self.settings_module or os.environ.get("SCRAPY_SETTINGS_MODULE")
                    or inside_project())

    def describe_project(self) -> str:
        """Where the settings came from, for messages."""
        module = self.settings_module or os.environ.get("SCRAPY_SETTINGS_MODULE")
        if module:
            return f"the settings module {module}"
        return "the Scrapy project here" if inside_project() else "no Scrapy project"

    def redis_url(self) -> tuple[str, str]:
        """The Redis URL and how it was given (for errors); raises ConfigError if none is, or
        if the one given is not a Redis URL."""
        url, given_as = self._find_redis_url()
        validate_redis_url(url, given_as=given_as)
        return url, given_as

    def _find_redis_url(self) -> tuple[str, str]:
        found = self._first_given(URL_SETTING, self.redis_url_flag, "--redis-url")
        if found is not None:
            return found
        raise NoRedisGiven(
            f"no Redis given: pass --redis-url URL, set the environment variable {URL_SETTING}, "
            f"or run inside a Scrapy project whose settings.py sets {URL_SETTING} = "
            '"redis://:password@10.0.0.5:6379/0" (or -s CLUSTERSYNC_REDIS_URL=URL); '
            f"looked in {self.describe_project()}"
        )

    def read_url(self) -> tuple[str, str] | None:
        """The URL of the Redis that commands which only read may read from (a replica of the
        job's Redis near this machine) and how it was given; None if none is. Raises
        ConfigError if the one given is not a Redis URL."""
        found = self._first_given(READ_URL_SETTING, self.read_url_flag, "--read-url")
        if found is not None:
            validate_redis_url(found[0], given_as=found[1])
        return found

    def _first_given(self, setting: str, flag: str | None,
                     flag_name: str) -> tuple[str, str] | None:
        """``setting``'s value and where it came from: the option, ``-s``, the environment,
        the project's settings, the first given; None if none gives it."""
        if flag:
            return flag, flag_name
        if self.overrides.get(setting):
            return self.overrides[setting], f"-s {setting}"
        check_environment()
        if os.environ.get(setting):
            return os.environ[setting], f"the environment variable {setting}"
        from_project = self.settings.get(setting)
        if from_project:
            return str(from_project), f"the setting {setting} of {self.describe_project()}"
        return None

    def tls(self, url: str) -> TlsOptions:
        """The project's CLUSTERSYNC_TLS_* settings for ``url``; ConfigError if a file they
        name is missing or ``url`` is not a TLS URL (the files may also be in its query)."""
        return TlsOptions.from_settings(self.settings).check(url)

    def job(self, given: str | None) -> str | None:
        """``given`` (the JOB argument), else the project's ``CLUSTERSYNC_JOB``, checked; None
        when neither names a job (the caller may then look for the only job on the Redis)."""
        if given:
            return validate_job_name(given, given_as="JOB")
        from_project = self.settings.get(JOB_SETTING)
        if from_project:
            return validate_job_name(str(from_project),
                                     given_as=f"{JOB_SETTING} of {self.describe_project()}")
        return None

    def add_overrides(self, pairs: tuple[str, ...]) -> None:
        """Apply ``-s NAME=VALUE`` options (given before or after the subcommand) on top of the
        settings; ConfigError naming a pair without ``=`` or an unknown ``CLUSTERSYNC_*`` name."""
        overrides = parse_overrides(pairs)
        check_setting_names(overrides, dict.fromkeys(overrides, "set with -s"))
        self.overrides.update(overrides)
        self._settings = None  # built again, with these on top, when next read

    def dedup(self) -> DedupSettings:
        """The project's dedup settings, for a job the CLI creates (as its first node would)."""
        settings = self.settings
        return DedupSettings(
            mode=str(settings.get("CLUSTERSYNC_DEDUP", DEFAULTS["CLUSTERSYNC_DEDUP"])),
            bloom_capacity=settings.getint("CLUSTERSYNC_BLOOM_CAPACITY",
                                           int(DEFAULTS["CLUSTERSYNC_BLOOM_CAPACITY"])),
            bloom_error_rate=settings.getfloat("CLUSTERSYNC_BLOOM_ERROR_RATE",
                                               float(DEFAULTS["CLUSTERSYNC_BLOOM_ERROR_RATE"])),
        )

    def fingerprinter(self) -> RequestFingerprinterProtocol:
        """The project's request fingerprinter, built as Scrapy builds a crawler's:
        ``REQUEST_FINGERPRINTER_CLASS`` (after the project's add-ons updated the settings)
        through its ``from_crawler``, so its own settings apply."""
        from scrapy import Spider
        from scrapy.crawler import Crawler
        from scrapy.utils.misc import build_from_crawler, load_object

        settings = self.settings.copy()
        url, _ = self.redis_url()
        # the add-on checks the URL; the one in use may come from the flag or the environment
        settings.set(URL_SETTING, url, priority="cmdline")
        crawler = Crawler(Spider, settings)
        crawler.addons.load_settings(crawler.settings)
        cls: Any = load_object(crawler.settings["REQUEST_FINGERPRINTER_CLASS"])
        fingerprinter: RequestFingerprinterProtocol = build_from_crawler(cls, crawler)
        return fingerprinter


def check_environment() -> None:
    """ConfigError naming an environment variable ``CLUSTERSYNC_*`` that is no setting (the
    command reads ``CLUSTERSYNC_REDIS_URL`` there, so a misspelled one would go unseen)."""
    names = [name for name in os.environ if name.startswith(PREFIX)]
    check_setting_names(names, dict.fromkeys(names, "an environment variable"))


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    """``-s NAME=VALUE`` options as a dict; ConfigError naming a pair without ``=``."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"-s {pair!r}: use -s NAME=VALUE")
        overrides[name] = value
    return overrides
