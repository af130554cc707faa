"""Which of Scrapy's own tests `make compat` runs with the add-on switched on: the one list.

Paths are relative to the root of Scrapy's source distribution. ``REQUIRED`` are the tests the
add-on must pass: a file, a class or a test, as given to pytest. ``DIFFERENCES`` are the tests
(exact ids) that check something a cluster scheduler does not have by design, each with why:
they must not pass (one that does is no longer a difference and must leave the list).
``SURVEY`` are whole modules that exercise the scheduler, the dupefilter, the engine's loop and
closing: run and reported; a failure there that is in neither list is an unexpected failure.

The table of differences in compat/README.md is made from ``DIFFERENCES``:
``python -m compat.selection`` rewrites it.
"""

from __future__ import annotations

from pathlib import Path

REQUIRED: tuple[str, ...] = (
    "tests/test_crawl.py::TestCrawl::test_referer_header",
    "tests/test_scheduler.py::TestSchedulerInMemory",
    # the same tests with SCHEDULER_PRIORITY_QUEUE set (a setting the cluster does not use)
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareInMemory::test_length",
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareInMemory::test_dequeue",
    "tests/test_scheduler.py::TestSchedulerWithDownloaderAwareInMemory::test_dequeue_priorities",
    "tests/test_scheduler.py::TestIntegrationWithDownloaderAwareInMemory",
    "tests/test_scheduler.py::test_unserializable_requests",
    "tests/test_engine_loop.py::TestRequestSendOrder",
    "tests/test_engine.py::TestSpiderIdle::test_dont_close_spider",
    "tests/test_engine.py::TestEngine::test_crawler_change_close_reason_on_idle",
    "tests/test_engine_loop.py::TestMain::test_start_not_an_async_generator",
)

_REOPENED = (
    "JOBDIR reopen: the requests wait in the job's queue in Redis, which has_pending_requests() "
    "and len() do not count (only what this node holds)"
)
_SLOT_FAIRNESS = (
    "DownloaderAwarePriorityQueue's slot fairness: the job's queue is ordered by priority only "
    "(SCHEDULER_PRIORITY_QUEUE is not used)"
)
_RECORDS_ONLY_WITH_THE_PUSH = (
    "RFPDupeFilter.request_seen() records the request: the cluster's records a fingerprint in "
    "Redis atomically with the push, request_seen() only asks"
)
_SEEN_FILE = "RFPDupeFilter's requests.seen file in JOBDIR: the job's dedup record is in Redis"
_SCHEDULER = "tests/test_scheduler.py::"
_DUPEFILTERS = "tests/test_dupefilters.py::TestRFPDupeFilter::"

DIFFERENCES: dict[str, str] = {
    f"{_SCHEDULER}TestSchedulerOnDisk::test_length": _REOPENED,
    f"{_SCHEDULER}TestSchedulerOnDisk::test_dequeue": _REOPENED,
    f"{_SCHEDULER}TestSchedulerOnDisk::test_dequeue_priorities": _REOPENED,
    f"{_SCHEDULER}TestSchedulerWithDownloaderAwareOnDisk::test_length": _REOPENED,
    f"{_SCHEDULER}TestSchedulerWithDownloaderAwareOnDisk::test_dequeue": _REOPENED,
    f"{_SCHEDULER}TestSchedulerWithDownloaderAwareOnDisk::test_dequeue_priorities": _REOPENED,
    f"{_SCHEDULER}TestSchedulerWithDownloaderAwareInMemory::test_logic": _SLOT_FAIRNESS,
    f"{_SCHEDULER}TestSchedulerWithDownloaderAwareOnDisk::test_logic": _SLOT_FAIRNESS,
    f"{_SCHEDULER}TestMigration::test_migration": (
        "JOBDIR disk queues migrated to DownloaderAwarePriorityQueue: the cluster has no disk "
        "queues"
    ),
    f"{_SCHEDULER}TestIncompatibility::test_incompatibility": (
        "DownloaderAwarePriorityQueue refuses CONCURRENT_REQUESTS_PER_IP: the cluster does not "
        "use SCHEDULER_PRIORITY_QUEUE"
    ),
    f"{_SCHEDULER}test_scheduler_without_crawler": (
        "Scrapy's Scheduler built without a crawler: ClusterScheduler needs the crawler's "
        "settings (Redis URL, job)"
    ),
    f"{_DUPEFILTERS}test_filter": _RECORDS_ONLY_WITH_THE_PUSH,
    f"{_DUPEFILTERS}test_request_fingerprint": _RECORDS_ONLY_WITH_THE_PUSH,
    f"{_DUPEFILTERS}test_dupefilter_path": _SEEN_FILE,
    f"{_DUPEFILTERS}test_seenreq_truncated": _SEEN_FILE,
    f"{_DUPEFILTERS}test_fingerprints_deprecation": (
        "RFPDupeFilter.fingerprints, a set of every fingerprint on the node: the job's are in "
        "Redis"
    ),
    f"{_DUPEFILTERS}test_log_debug[None]": (
        "stats are batched: dupefilter/filtered reaches the crawler's stats when the scheduler "
        "publishes its counts (when its Redis thread reports a change, and at close), not at "
        "each log() call"
    ),
    "tests/test_engine_close_spider.py::test_exception_scheduler": (
        "Scrapy's Scheduler internals: the test deletes Scheduler.dqs to make close() fail"
    ),
}

SURVEY: tuple[str, ...] = (
    "tests/test_scheduler.py",
    "tests/test_engine.py",
    "tests/test_engine_loop.py",
    "tests/test_engine_close_spider.py",
    "tests/test_crawl.py",
    "tests/test_crawler.py",
    "tests/test_dupefilters.py",
    "tests/test_closespider.py",
    "tests/test_spider_start.py",
    "tests/test_request_left.py",
    "tests/test_signals.py",
)

README = Path(__file__).resolve().parent / "README.md"
TABLE_START = "<!-- DIFFERENCES table: made by `python -m compat.selection`; edit selection.py -->"
TABLE_END = "<!-- end of the DIFFERENCES table -->"


def differences_table() -> str:
    """``DIFFERENCES`` as the Markdown table of compat/README.md."""
    rows = [f"| `{test}` | {reason} |" for test, reason in sorted(DIFFERENCES.items())]
    return "\n".join(["| Scrapy's test | Why the add-on differs by design |", "|---|---|", *rows])


def readme_with_table(readme: str) -> str:
    """``readme`` with the text between the table's markers replaced by ``differences_table``."""
    before, rest = readme.split(TABLE_START, 1)
    _, after = rest.split(TABLE_END, 1)
    return f"{before}{TABLE_START}\n{differences_table()}\n{TABLE_END}{after}"


if __name__ == "__main__":
    README.write_text(readme_with_table(README.read_text()))
