"""What every ``clustersync`` command shares, as one typed object: the project, the Redis URL
and how it was given, the client made from it on first use, and which job a command is about.

A command that only reads is marked ``@reads_only``: its client is then that of
``CLUSTERSYNC_READ_URL`` (``--read-url``), a replica near this machine, when one is given; every
other command, and every write, goes to the job's Redis.

The group makes one ``CliContext`` per run (``scrapy clustersync`` hands in one holding the
settings Scrapy built); commands receive it with ``@pass_cli``. Its methods raise the package's
own errors (ConfigError, StoreError) and ``JobNotFound``: ``ClusterGroup`` turns the first two
into a message and an exit code, so no command catches them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from ..config import DedupSettings, redact_url
from ..store import JobStore, make_client
from ..store.job_list import job_names
from .exit_codes import JobNotFound
from .project import JOB_SETTING, NoJobGiven, ProjectContext

if TYPE_CHECKING:
    import redis

#: how many job names an error lists when JOB is left out and there are several
JOBS_NAMED_AT_MOST = 10


@dataclass
class CliContext:
    """One ``clustersync`` run: the project and options, and what they lead to, each found
    once, when a command first needs it (a usage error needs no Redis)."""

    project: ProjectContext = field(default_factory=ProjectContext)
    _url: tuple[str, str] | None = field(default=None, init=False, repr=False)
    _client: redis.Redis | None = field(default=None, init=False, repr=False)
    #: the command only reads (``reads_only``): it may read from CLUSTERSYNC_READ_URL's Redis
    reading: bool = field(default=False, init=False)
    _read: tuple[str, str] | None = field(default=None, init=False, repr=False)
    _read_client: redis.Redis | None = field(default=None, init=False, repr=False)

    def redis_url(self) -> str:
        """The Redis URL (see ProjectContext.redis_url); ConfigError if none is given or the
        one given is not a Redis URL."""
        if self._url is None:
            self._url = self.project.redis_url()
        return self._url[0]

    def read_url(self) -> str | None:
        """CLUSTERSYNC_READ_URL, if one is given (see ``read_client``)."""
        self.read_client()  # finds it, once
        return self._read[0] if self._read is not None else None

    def where(self) -> str:
        """The Redis in use and where its URL came from, for messages (password hidden)."""
        if self.reading and self._read is not None:
            url, given_as = self._read
            return f"the Redis at {redact_url(url)} (from {given_as}, read only)"
        if self._url is None:
            return "the Redis given"
        url, given_as = self._url
        return f"the Redis at {redact_url(url)} (from {given_as})"

    def client(self) -> redis.Redis:
        """The client of that Redis, made on first use (it connects on its first call); for a
        command that only reads, that of CLUSTERSYNC_READ_URL if one is given."""
        if self.reading:
            read = self.read_client()
            if read is not None:
                return read
        if self._client is None:
            url = self.redis_url()  # TLS files: the project's CLUSTERSYNC_TLS_* (or the URL's)
            self._client = make_client(url, self.project.tls(url))
        return self._client

    def read_client(self) -> redis.Redis | None:
        """The client of CLUSTERSYNC_READ_URL, made on first use; None if none is given."""
        if self._read_client is None:
            found = self.project.read_url()
            if found is None:
                return None
            self._read = found
            self._read_client = make_client(found[0], self.project.tls(found[0]))
        return self._read_client

    def job_name(self, given: str | None) -> str:
        """The job a command is about: ``given``, else the project's ``CLUSTERSYNC_JOB``, else
        the only job on the Redis; NoJobGiven (a usage error) if none or several are there."""
        name = self.project.job(given)
        if name is not None:
            return name
        names = job_names(self.client())
        if len(names) == 1:
            return names[0]
        hint = (f"name the job, or set {JOB_SETTING} in the project's settings "
                "(a node's job is that setting, else its spider's name)")
        if not names:
            raise NoJobGiven(f"no JOB given and there is no job on {self.where()}: {hint}")
        listed = ", ".join(names[:JOBS_NAMED_AT_MOST]) + (
            ", ..." if len(names) > JOBS_NAMED_AT_MOST else "")
        raise NoJobGiven(f"no JOB given and {len(names)} jobs on {self.where()} ({listed}): "
                         f"{hint}; `clustersync jobs` lists them")

    def store(self, job: str | None, dedup: DedupSettings | None = None) -> JobStore:
        """The store of the job ``job`` resolves to (see ``job_name``), whether it exists or
        not; ``dedup``: the settings a job it creates gets."""
        name = self.job_name(job)
        return JobStore(self.client(), name, node_id="cli", dedup=dedup, writes_seen=None)

    def existing_store(self, job: str | None) -> JobStore:
        """As ``store``, for a job that must exist: JobNotFound (exit 3) if it does not."""
        store = self.store(job)
        if not store.status().exists:
            self.not_found(store.keys.job)
        return store

    def not_found(self, job: str) -> NoReturn:
        """Raise JobNotFound for ``job``, saying where it was looked for and how to list jobs."""
        raise JobNotFound(f"job {job!r} does not exist on {self.where()}; `clustersync jobs` "
                          "lists the jobs there")


#: hands a command the run's CliContext (made if the group was invoked without one)
pass_cli = click.make_pass_decorator(CliContext, ensure=True)


F = TypeVar("F", bound=Callable[..., Any])


def reads_only(command: F) -> F:
    """Mark a command (below ``@pass_cli``) that sends Redis no write: its client is that of
    CLUSTERSYNC_READ_URL when one is given (``CliContext.client``)."""

    @functools.wraps(command)
    def reading(cli: CliContext, *args: Any, **kwargs: Any) -> Any:
        cli.reading = True
        return command(cli, *args, **kwargs)

    return reading  # type: ignore[return-value]
