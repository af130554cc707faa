"""``scrapy clustersync ...``: the ``clustersync`` command as a Scrapy command.

Registered through the ``scrapy.commands`` entry point (pyproject.toml). Scrapy has already
read the project's settings and the ``-s`` options when it runs the command; everything else
goes to the ``clustersync`` command group unchanged.
"""

from __future__ import annotations

import argparse

from scrapy.commands import ScrapyCommand

from .app import main
from .context import CliContext
from .project import ProjectContext


class Command(ScrapyCommand):
    """``scrapy clustersync [--redis-url URL] COMMAND ...``: see ``clustersync --help``."""

    requires_project = False
    requires_crawler_process = False

    def syntax(self) -> str:
        return "[--redis-url URL] COMMAND [ARGS]... (clustersync --help)"

    def short_desc(self) -> str:
        return "See and steer scrapy-clustersync jobs (the clustersync command)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        # --help goes to the clustersync group, which knows its commands
        parser.add_argument("-h", "--help", dest="clustersync_help", action="store_true",
                            help="show the clustersync command's help")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if opts.clustersync_help:
            args = [*args, "--help"]
        # standalone: click prints errors and exits with its code (exit_codes.py)
        main.main(args=args, prog_name="scrapy clustersync",
                  obj=CliContext(ProjectContext(base=self.settings)))
