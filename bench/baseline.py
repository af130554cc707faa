"""An older version of the package in a virtualenv of its own, for an A/B run beside this one.

``python bench/run.py --baseline REV`` crawls with the package as it was at the git revision
REV too, in the same rounds as the current code, so the two are compared on one machine in one
run (the machine's noise hits both alike). The old version is installed (not imported from the
work tree), so its own entry points and its own module layout are what its nodes run.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINES_DIR = REPO / ".bench-baseline"


def _git(*args: str, stdout: int | None = subprocess.PIPE) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, stdout=stdout, text=True, check=True)
    return (done.stdout or "").strip()


def baseline_python(rev: str) -> tuple[str, Path]:
    """(short commit of ``rev``, the python of a virtualenv with the package as it was there).

    Built once under ``.bench-baseline/<commit>/`` and reused; raises ``CalledProcessError``
    with git's or pip's message when ``rev`` is unknown or the old package does not install.
    """
    commit = _git("rev-parse", "--short", f"{rev}^{{commit}}")
    root = BASELINES_DIR / commit
    python = root / "venv" / "bin" / "python"
    if python.exists():
        return commit, python
    source = root / "src"
    source.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    print(f"installing the package at {commit} into {root / 'venv'} ...", file=sys.stderr)
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(source)], check=True)
    return commit, python
