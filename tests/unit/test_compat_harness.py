"""The `make compat` harness (compat/): which tests it names, how it reads Scrapy's tox.ini."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.clustersync_compat import cluster_settings, job_name, job_scope
from compat.run import pytest_args
from compat.sdist import tox_test_requirements
from compat.selection import DIFFERENCES, README, REQUIRED, SURVEY, readme_with_table
from compat.summary import is_selected_by, print_summary, problems, required_outcomes


def test_a_required_test_that_no_longer_exists_counts_as_not_run() -> None:
    # given a report without the test a selector names (Scrapy renamed it)
    outcomes = {"tests/test_engine.py::TestEngine::test_crawl": {"outcome": "passed"}}
    # when the required outcomes are read
    found = required_outcomes(outcomes, ["tests/test_engine.py::TestSpiderIdle::test_gone"])
    # then it is "not run", never silently passed
    assert found == {"tests/test_engine.py::TestSpiderIdle::test_gone": "not run"}


def test_a_required_file_or_class_covers_each_of_its_tests_and_parametrizations() -> None:
    # given outcomes of a parametrized test, a class and a test of another class
    outcomes = {
        "tests/a.py::T::test_x[one]": {"outcome": "passed"},
        "tests/a.py::T::test_x[two]": {"outcome": "failed"},
        "tests/a.py::T::test_xy": {"outcome": "failed"},
    }
    # when the test test_x is required
    found = required_outcomes(outcomes, ["tests/a.py::T::test_x"])
    # then both parametrizations count, and test_xy (another name) does not
    assert found == {"tests/a.py::T::test_x[one]": "passed", "tests/a.py::T::test_x[two]": "failed"}


def test_every_required_test_is_run_once_by_default() -> None:
    # given the selection, when the default run's pytest arguments are made
    args = pytest_args(required_only=False)
    # then every survey module is there once, and each required test is in one of the arguments
    assert sorted(set(args)) == sorted(args)
    assert set(SURVEY) <= set(args)
    assert all(any(r == a or r.startswith(f"{a}::") for a in args) for r in REQUIRED)


def test_scrapys_test_requirements_are_read_from_its_tox_ini(tmp_path: Path) -> None:
    # given a tox.ini shaped like Scrapy's
    tox_ini = tmp_path / "tox.ini"
    tox_ini.write_text(
        "[test-requirements]\ndeps =\n    attrs\n    sybil >= 1.3.0  # why\n    pytest-twisted\n"
        "[testenv]\ndeps =\n    {[test-requirements]deps}\n    pytest >= 8.4.1  # a pin\n"
    )
    # when its requirements are read
    requirements = tox_test_requirements(tox_ini)
    # then the packages and pins come out, without comments or tox references
    assert requirements == ["attrs", "sybil >= 1.3.0", "pytest-twisted", "pytest >= 8.4.1"]


def test_each_crawler_gets_a_valid_job_of_its_test_and_spider() -> None:
    # given a spider name with characters a job name cannot hold, and one with none
    # when the jobs are named, then they are valid job names of the test's prefix
    assert job_name("compat7-abc123", "example.com/spider one", "crawler3") == (
        "compat7-abc123.example.com_spider_one.crawler3"
    )
    assert job_name("compat7-abc123", None, "crawler4") == "compat7-abc123.spider.crawler4"
    settings = cluster_settings("redis://127.0.0.1:1/0", "compat7-abc123.spider", "/tmp/s")
    assert settings["CLUSTERSYNC_JOB"] == "compat7-abc123.spider"
    assert settings["CLUSTERSYNC_HEARTBEAT_INTERVAL"] * 3 <= settings["CLUSTERSYNC_LEASE_TIMEOUT"]


def test_crawlers_share_a_job_only_through_one_jobdir_as_scrapy_crawlers_share_state() -> None:
    # given crawlers without a JOBDIR, then each has a job of its own (a fresh crawl)
    assert job_scope(None, 1) != job_scope(None, 2)
    # given crawlers of one JOBDIR, then they share their job (a resumed crawl), and crawlers
    # of another JOBDIR do not
    assert job_scope("/tmp/a", 1) == job_scope("/tmp/a", 2) != job_scope("/tmp/b", 3)


FAILED = {"outcome": "failed", "reason": "AttributeError: no dqs"}
PASSED = {"outcome": "passed", "reason": ""}


def test_a_run_passes_when_required_tests_pass_and_differences_fail() -> None:
    outcomes = {"tests/a.py::test_required": PASSED, "tests/a.py::test_dqs": FAILED}
    assert problems(outcomes, ["tests/a.py::test_required"], ["tests/a.py::test_dqs"]) == []


def test_a_difference_that_passes_or_is_missing_fails_the_run_so_the_list_stays_true() -> None:
    # given a listed difference that now passes, and one the run no longer has
    outcomes = {"tests/a.py::test_dqs": PASSED}
    # when the run is judged
    found = problems(outcomes, [], ["tests/a.py::test_dqs", "tests/a.py::test_renamed"])
    # then both fail it, but not in a run of the required tests only (differences not run)
    assert found == ["listed in DIFFERENCES but passed: tests/a.py::test_dqs",
                     "listed in DIFFERENCES but not run: tests/a.py::test_renamed"]
    assert problems(outcomes, [], ["tests/a.py::test_dqs"], differences_were_run=False) == []


def test_the_summary_prints_differences_apart_from_unexpected_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given a failing difference and another failure
    outcomes = {"tests/a.py::test_dqs": FAILED, "tests/a.py::test_bug": FAILED}
    # when the summary is printed
    print_summary(outcomes, [], {"tests/a.py::test_dqs": "Scrapy's internals: dqs"}, 1.0)
    # then the difference shows with its reason, and only the other failure is unexpected
    differences, unexpected = capsys.readouterr().out.split("Unexpected failures")
    assert "tests/a.py::test_dqs: Scrapy's internals: dqs" in differences
    assert "test_dqs" not in unexpected and "tests/a.py::test_bug" in unexpected


def test_no_required_test_is_also_listed_as_a_difference() -> None:
    assert [t for t in DIFFERENCES if any(is_selected_by(t, r) for r in REQUIRED)] == []


def test_the_readmes_table_of_differences_is_the_one_selection_py_makes() -> None:
    # `python -m compat.selection` rewrites it after DIFFERENCES changes
    readme = README.read_text()
    assert readme_with_table(readme) == readme
