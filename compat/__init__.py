"""`make compat`: Scrapy's own tests, run with the add-on switched on (see compat/README.md)."""
