"""``seed --callback NAME`` checked against the spider of the job, inside a Scrapy project.

The job's spider is the project's spider whose job is the one seeded: its ``CLUSTERSYNC_JOB``
(custom_settings, else the project's), else its name, as a node finds its job. A name that is
no method of that spider is refused before anything is written, with the methods that can be
callbacks; without a project, or when no spider of the project runs the job, the name cannot be
checked and the command says so (a node that cannot resolve it dead-letters the request:
``clustersync dead JOB``, then ``--requeue`` once the spider has the method).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import click

from .project import JOB_SETTING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: methods of a spider that are no callbacks, though a project's spider may define them
NOT_CALLBACKS = frozenset({"start", "start_requests", "closed", "from_crawler",
                           "update_settings", "handles_request"})


def check_callback(settings: BaseSettings, job: str, callback: str) -> str | None:
    """None if ``callback`` is a method of the job's spider; a sentence saying why it could not
    be checked if the spider cannot be told; click.BadParameter (exit 2) naming the methods
    that can be callbacks if it is none of them."""
    try:
        spiders = spiders_of_job(settings, job)
    except Exception as exc:  # the project's own code failed to import: say so, seed anyway
        return (f"--callback {callback} not checked: the project's spiders could not be "
                f"loaded ({type(exc).__name__}: {exc})")
    if not spiders:
        return (f"--callback {callback} not checked: no spider of the project runs job "
                f"{job!r} (its {JOB_SETTING} or, without one, its name)")
    if any(callable(getattr(cls, callback, None)) and not callback.startswith("__")
           for cls in spiders):
        return None
    offered = "; ".join(f"spider {getattr(cls, 'name', cls.__name__)!r} has "
                        f"{', '.join(callback_names(cls)) or 'none'}" for cls in spiders)
    raise click.BadParameter(f"{callback!r} is not a method of the spider of job {job!r} "
                             f"({offered})", param_hint="--callback")


def spiders_of_job(settings: BaseSettings, job: str) -> list[type[Any]]:
    """The project's spider classes whose job is ``job``; [] if the project has none."""
    from scrapy.spiderloader import get_spider_loader

    if not settings.getlist("SPIDER_MODULES"):
        return []
    loader = get_spider_loader(settings)
    project_job = settings.get(JOB_SETTING)
    found = []
    for name in loader.list():
        cls = loader.load(name)
        own = (getattr(cls, "custom_settings", None) or {}).get(JOB_SETTING)
        if (own or project_job or name) == job:
            found.append(cls)
    return found


def callback_names(cls: type[Any]) -> list[str]:
    """The methods of spider class ``cls`` that can be callbacks: those the project defines
    (Scrapy's own classes excluded), public, but NOT_CALLBACKS."""
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("scrapy", "builtins"):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and name not in NOT_CALLBACKS \
                    and inspect.isfunction(value):
                names.add(name)
    return sorted(names)
