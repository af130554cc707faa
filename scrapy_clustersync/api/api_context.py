"""What every request of the HTTP API shares: the Redis client, the project's settings (the
seed's fingerprinter and schemes, the settings history kept) and whether requests need a token
even while none exists (serve listens beyond loopback)."""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import JOB_NAME_RE, validate_settings_history
from ..store import JobStatus, JobStore
from ..store.api_tokens import TokenStore
from ..store.job_list import job_names
from .api_errors import ApiError

#: how long the list of jobs found with SCAN is used again: the one thing serve remembers, so
#: that a dashboard polling every 2 s does not SCAN a Redis of a million keys each time (a new
#: job shows up within this; a purged one is left out at once)
JOB_NAMES_TTL_S = 10.0

if TYPE_CHECKING:
    import redis
    from scrapy.settings import Settings
    from scrapy.utils.request import RequestFingerprinterProtocol

    from ..cli.project import ProjectContext


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address or ``localhost`` (only this machine can connect)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ApiContext:
    """The state of one ``clustersync serve``: nothing here is a copy of Redis's state."""

    client: redis.Redis
    project: ProjectContext
    #: serve listens on a loopback address: while no token exists, requests need none
    loopback: bool = True
    #: the client of CLUSTERSYNC_READ_URL (a replica near serve) that the reads use; None:
    #: they use ``client``, as every write does
    reads: redis.Redis | None = None
    _fingerprinter: RequestFingerprinterProtocol | None = field(default=None, repr=False)
    _names: tuple[float, list[str]] | None = field(default=None, repr=False)
    _names_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def settings(self) -> Settings:
        """The project's settings (``clustersync``'s, with ``--settings`` and ``-s``)."""
        return self.project.settings

    def fingerprinter(self) -> RequestFingerprinterProtocol:
        """The project's request fingerprinter (a seed's), made on first use."""
        if self._fingerprinter is None:
            self._fingerprinter = self.project.fingerprinter()
        return self._fingerprinter

    @property
    def tokens(self) -> TokenStore:
        return TokenStore(self.client)

    @property
    def reader(self) -> redis.Redis:
        """The client the reads use: the replica's if serve was given one, else ``client``."""
        return self.reads if self.reads is not None else self.client

    def job_names(self) -> list[str]:
        """The jobs on the Redis, as a SCAN found them at most JOB_NAMES_TTL_S ago."""
        with self._names_lock:
            now = time.monotonic()
            if self._names is None or now - self._names[0] > JOB_NAMES_TTL_S:
                self._names = (now, job_names(self.reader))
            return list(self._names[1])

    def history_keep(self) -> int:
        """``CLUSTERSYNC_SETTINGS_HISTORY`` of the project serve runs in."""
        return validate_settings_history(self.settings)

    def store(self, job: str) -> JobStore:
        """The store of ``job``, which must exist: 422 for a name no job can have (before any
        Redis call), 404 if there is no such job."""
        return self.job_status(job)[0]

    def read_store(self, job: str) -> JobStore:
        """``store(job)`` for a read: on the replica if serve was given one."""
        return self.job_status(job, read=True)[0]

    def job_status(self, job: str, read: bool = False) -> tuple[JobStore, JobStatus]:
        """``store(job)`` and the job's status, read once (one pipeline); ``read``: from the
        replica if serve was given one (the store then only reads)."""
        if not JOB_NAME_RE.match(job):
            raise ApiError(422, f"{job!r} is not a job name (letters, digits and _ . : -, "
                                "starting with a letter or digit, at most 200)")
        store = JobStore(self.reader if read else self.client, job, node_id="cli",
                         writes_seen=None)
        report = store.status()
        if not report.exists:
            raise not_found(job)
        return store, report


def not_found(job: str) -> ApiError:
    return ApiError(404, f"job {job!r} does not exist on this Redis; GET /api/jobs lists the "
                         "jobs")
