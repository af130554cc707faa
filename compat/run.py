"""`make compat`: run Scrapy's own tests (compat/selection.py) with the add-on switched on.

Steps: download the sdist of the Scrapy installed in this environment, extract its tests,
build a separate virtualenv with this package (editable), that Scrapy and Scrapy's test
requirements, start a redis-server of our own on a free port, run pytest with the plugin
compat/clustersync_compat.py and print what passed. Everything lands in .compat/ (gitignored)
and is reused by the next run. Exit status 0 only if every test of ``REQUIRED`` passed and no
test of ``DIFFERENCES`` did (see summary.py).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from testkit.redis_server import RedisServer

from .sdist import download, extract_tests, tox_test_requirements
from .selection import DIFFERENCES, REQUIRED, SURVEY
from .summary import load_outcomes, print_summary

PROJECT_ROOT = Path(__file__).resolve().parent.parent
COMPAT_DIR = PROJECT_ROOT / "compat"
CACHE_DIR = PROJECT_ROOT / ".compat"
#: Scrapy's tests each take seconds; one still running after this hangs (a crawl that never
#: closes). pytest-timeout's thread method kills the xdist worker; xdist starts another and goes
#: on (its default signal method raises inside the reactor and every later test fails).
PER_TEST_TIMEOUT_S = 20
#: xdist workers; a hung test waits without using the CPU, so two halve the wait
WORKERS_ENV = "COMPAT_WORKERS"


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    scrapy_version = version("scrapy")
    sdist = download(scrapy_version, CACHE_DIR / "downloads")
    scrapy_tests = extract_tests(sdist, CACHE_DIR)
    python = compat_venv(scrapy_version, tox_test_requirements(scrapy_tests / "tox.ini"))
    selected = pytest_args(args.required_only) + args.pytest_args
    report = CACHE_DIR / "run" / "report.json"
    started = time.monotonic()
    with RedisServer(CACHE_DIR / "run" / "redis") as redis:
        run_pytest(python, scrapy_tests, selected, redis.url, report)
    problems = print_summary(load_outcomes(report), REQUIRED, DIFFERENCES,
                             time.monotonic() - started,
                             differences_were_run=not args.required_only)
    return 1 if problems else 0


def pytest_args(required_only: bool) -> list[str]:
    """The node ids to give pytest: the survey modules and any required test or difference
    not in them."""
    if required_only:
        return list(REQUIRED)
    files = set(SURVEY)
    named = [*REQUIRED, *DIFFERENCES]
    return list(SURVEY) + [test for test in named if test.split("::")[0] not in files]


def compat_venv(scrapy_version: str, requirements: list[str]) -> Path:
    """The python of .compat/venv, (re)built when what it should hold changed.

    A venv of its own, not the project's .venv: Scrapy's test requirements include pytest
    plugins (pytest-twisted, pytest-xdist, pytest-rerunfailures, pytest-cov) that pytest loads
    on every run, which would change how `make test` runs the project's own tests.
    """
    venv = CACHE_DIR / "venv"
    wanted = [f"scrapy=={scrapy_version}", *requirements]
    stamp = venv / "compat-installed"
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", str(PROJECT_ROOT), *wanted], check=True)
    stamp.write_text(digest)
    return venv / "bin" / "python"


def run_pytest(
    python: Path, scrapy_tests: Path, selected: list[str], redis_url: str, report: Path
) -> int:
    """Run pytest in the extracted sdist with the plugin; its exit status."""
    spool = CACHE_DIR / "run" / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    report.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(COMPAT_DIR),
        "CLUSTERSYNC_COMPAT_REDIS_URL": redis_url,
        "CLUSTERSYNC_COMPAT_REPORT": str(report),
        "CLUSTERSYNC_COMPAT_SPOOL_DIR": str(spool),
    }
    command = [
        str(python), "-m", "pytest", "-p", "clustersync_compat", "-p", "no:cacheprovider",
        "-q", "-rfE", f"--timeout={PER_TEST_TIMEOUT_S}", "--timeout-method=thread",
        "-n", os.environ.get(WORKERS_ENV, "2"), "--max-worker-restart=1000", *selected,
    ]
    # its own process group: the mock servers of a killed xdist worker outlive it, and go here
    process = subprocess.Popen(command, cwd=scrapy_tests, env=env, start_new_session=True)
    try:
        return process.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--required-only", action="store_true",
        help="only the tests of REQUIRED (DIFFERENCES are then not checked)"
    )
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest, after --")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
