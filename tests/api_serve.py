"""`clustersync serve` as the tests run it: a real subprocess on a free port of 127.0.0.1, and
an httpx client of it."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx
from prometheus_client.parser import text_string_to_metric_families

from testkit.redis_server import free_port

#: how long serve may take to answer its first request (it imports Scrapy and FastAPI)
START_TIMEOUT_S = 30.0


class ServeProcess:
    """``clustersync --redis-url URL serve --port PORT`` in a process of its own."""

    def __init__(self, redis_url: str, workdir: Path, *options: str,
                 verify: ssl.SSLContext | bool = True, cwd: Path | None = None) -> None:
        """``options``: more of serve's command line; ``verify``: what the client checks
        serve's certificate with, once options include ``--ssl-certfile``; ``cwd``: where
        serve runs (a Scrapy project there is read; ``workdir`` unless told)."""
        self.port = free_port()
        scheme = "https" if "--ssl-certfile" in options else "http"
        self.base_url = f"{scheme}://127.0.0.1:{self.port}"
        self.log_path = workdir / f"serve-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTERSYNC_",
                                                                        "SCRAPY_"))}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "scrapy_clustersync.cli", "--redis-url", redis_url,
                 "serve", "--port", str(self.port), "--log-level", "warning", *options],
                cwd=cwd or workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.base_url, timeout=10.0, verify=verify)

    def wait_ready(self) -> ServeProcess:
        """Return once serve answers a request (any status); fail with its log if it exits."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"serve exited with {self.process.returncode}:\n"
                                     f"{self.log()}")
            try:
                self.http.get("/api/whoami")
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"serve did not answer in {START_TIMEOUT_S}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> ServeProcess:
        return self.wait_ready()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def metric_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A /metrics answer, parsed with Prometheus's own text parser: each sample name's
    (labels, value) pairs."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples
