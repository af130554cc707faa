"""Which of Scrapy's own tests `make compat` runs with the add-on switched on: the one list.

Paths are relative to the root of Scrapy's source distribution. ``REQUIRED`` are the tests
issue 8 names: the add-on must pass them (the exit status of `make compat` says whether it
does). ``SURVEY`` are whole modules that exercise the scheduler, the dupefilter, the engine's
loop and closing: run and reported, their failures listed, but they do not fail the target.
"""

from __future__ import annotations

REQUIRED: tuple[str, ...] = (
    "tests/test_crawl.py::TestCrawl::test_referer_header",
    "tests/test_scheduler.py",
    "tests/test_engine_loop.py::TestRequestSendOrder",
    "tests/test_engine.py::TestSpiderIdle::test_dont_close_spider",
    "tests/test_engine.py::TestEngine::test_crawler_change_close_reason_on_idle",
    "tests/test_engine_loop.py::TestMain::test_start_not_an_async_generator",
)

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
