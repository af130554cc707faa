"""Scrapy's source distribution: download it from PyPI, extract its tests, read its test deps."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

#: What the tests need from the sdist: the tests, the root conftest.py (fixtures such as
#: ``mockserver``) and pyproject.toml (pytest's options: ``--reactor=asyncio``, warnings as
#: errors). Not ``scrapy/``: the Scrapy under test is the one installed next to the add-on.
EXTRACTED = ("tests/", "conftest.py", "pyproject.toml", "tox.ini")


def download(version: str, into: Path) -> Path:
    """The sdist of ``scrapy==version`` in ``into``, downloaded with pip unless already there."""
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob(f"scrapy-{version}.tar.gz"))
    if found:
        return found[0]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
         "--no-deps", f"scrapy=={version}", "--dest", str(into)],
        check=True,
    )
    return _only(sorted(into.glob(f"scrapy-{version}.tar.gz")), into)


def extract_tests(sdist: Path, into: Path) -> Path:
    """``into``/scrapy-VERSION with the sdist's `EXTRACTED` parts; reused once complete."""
    root_name = sdist.name.removesuffix(".tar.gz")
    target = into / root_name
    if (target / "conftest.py").exists():
        return target
    partial = into / f"{root_name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        wanted = [m for m in archive.getmembers() if _wanted(m.name, root_name)]
        archive.extractall(partial, members=wanted, filter="data")
    (partial / root_name).rename(target)  # complete, or not there at all
    shutil.rmtree(partial)
    return target


def tox_test_requirements(tox_ini: Path) -> list[str]:
    """The requirements Scrapy's tox.ini gives its test environments (``[test-requirements]``
    and the ``[testenv]`` pins), references like ``{[test-requirements]deps}`` left out."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(tox_ini, encoding="utf-8")
    lines = parser["test-requirements"]["deps"].splitlines()
    lines += parser["testenv"]["deps"].splitlines()
    requirements = []
    for line in lines:
        requirement = line.split("#", 1)[0].strip()
        if requirement and not requirement.startswith("{"):
            requirements.append(requirement)
    return requirements


def _wanted(name: str, root_name: str) -> bool:
    relative = name.removeprefix(f"{root_name}/")
    return relative != name and any(
        relative == part or relative.startswith(part) for part in EXTRACTED
    )


def _only(paths: list[Path], where: Path) -> Path:
    if len(paths) != 1:
        raise RuntimeError(f"expected one Scrapy sdist in {where}, found {paths}")
    return paths[0]
