"""The Scrapy project every benchmark variant runs: one spider, one settings module per variant."""
