"""``clustersync``: see and steer the jobs of a cluster from any machine that reaches Redis.

The group and its options; each command lives in the module of its kind (job_commands,
seed_commands, check_commands, top_command, control_commands, task_commands, dead_commands,
config_commands, result_commands, serve_command, sink_command, token_commands).
Inside a Scrapy project (or with ``--settings MODULE`` / ``-s NAME=VALUE``) the commands read
``CLUSTERSYNC_REDIS_URL``, ``CLUSTERSYNC_JOB`` and the request fingerprinter from the
project's settings, as ``scrapy`` commands do (project.py). Also ``scrapy clustersync ...``
(scrapy_command.py).
"""

from __future__ import annotations

import sys

import click

from .check_commands import check, nodes
from .cluster_group import ClusterGroup
from .config_commands import config
from .context import CliContext, pass_cli
from .control_commands import pause, resume, stop
from .dead_commands import dead
from .exit_codes import EXIT_CODES_HELP
from .job_commands import jobs, purge, restart, status
from .options import settings_option
from .region_commands import regions
from .result_commands import consume, export, readers
from .seed_commands import seed
from .serve_command import serve
from .sink_command import sink
from .task_commands import failed, task, tasks
from .token_commands import token
from .top_command import top


@click.group("clustersync", cls=ClusterGroup, epilog=EXIT_CODES_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--redis-url", metavar="URL",
              help="Redis of the cluster; wins over -s, $CLUSTERSYNC_REDIS_URL and the "
                   "project's CLUSTERSYNC_REDIS_URL.")
@click.option("--read-url", metavar="URL",
              help="A replica of that Redis near this machine, which the commands that only "
                   "read (status, jobs, nodes, top, tasks, failed, dead, config get and history) "
                   "and serve's reads read from; wins over -s, $CLUSTERSYNC_READ_URL and the "
                   "project's CLUSTERSYNC_READ_URL. Writes always go to --redis-url.")
@settings_option
@click.option("--settings", "settings_module", metavar="MODULE",
              help="Settings module to use instead of the project's (scrapy.cfg).")
@pass_cli
def main(cli: CliContext, redis_url: str | None, read_url: str | None,
         settings_module: str | None) -> None:
    """See and steer scrapy-clustersync jobs.

    Inside a Scrapy project the Redis URL, the job (CLUSTERSYNC_JOB) and the request
    fingerprinter come from its settings. JOB, wherever it is asked for, may be left out: it is
    then the project's CLUSTERSYNC_JOB, else the only job on that Redis. -s NAME=VALUE may come
    before or after the command.
    """
    project = cli.project
    project.redis_url_flag = redis_url or project.redis_url_flag
    project.read_url_flag = read_url or project.read_url_flag
    project.settings_module = settings_module or project.settings_module


for _command in (jobs, status, nodes, top, check, seed, dead, failed, task, tasks, restart,
                 pause, resume, stop, config, purge, export, consume, sink, readers, serve,
                 token, regions):
    main.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
