"""Vanilla Scrapy: its own in-memory scheduler and dupefilter."""

from benchproj.settings import *  # noqa: F403
