"""The bodies the HTTP API takes, as pydantic models: a body that does not fit is refused with
422 and a message naming each field that was wrong, before anything reaches Redis."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: URLs one seed request takes at most (``clustersync seed -f`` for more)
SEED_URLS_MAX = 10_000


class Body(BaseModel):
    """A request body: unknown fields are refused (a misspelled one would be ignored)."""

    model_config = ConfigDict(extra="forbid")


class SeedBody(Body):
    """URLs to add to the job's queue, checked as ``clustersync seed`` checks them."""

    urls: list[str] = Field(min_length=1, max_length=SEED_URLS_MAX,
                            description="the URLs to seed; already-seen ones are skipped")
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)
    callback: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                 description="spider method to call (default: parse)")
    create: bool = Field(default=False, description="create the job if it does not exist")


class SettingsBody(Body):
    """A change of the job's shared settings, all or nothing, as one new version."""

    set: dict[str, Any] = Field(default_factory=dict,
                                description="setting -> its new value (JSON-typed)")
    unset: list[str] = Field(default_factory=list,
                             description="settings each node takes back from its own")
    expect_version: int | None = Field(default=None, ge=0, description="refuse (409) unless the "
                                       "settings are at this version")

    @model_validator(mode="after")
    def _something(self) -> SettingsBody:
        if not self.set and not self.unset:
            raise ValueError("give `set` (setting -> value) or `unset` (settings), or both")
        both = set(self.set) & set(self.unset)
        if both:
            raise ValueError(f"set and unset both name {', '.join(sorted(both))}")
        return self


class CheckBody(Body):
    """``clustersync check`` options."""

    repair: bool = Field(default=False,
                         description="mend what can be mended safely (role operator)")
    deep: bool = Field(default=False, description="list every entry even when the counts add up")


class RestartBody(Body):
    """``clustersync restart`` options."""

    forget_seen: bool = Field(default=False, description="also clear the seen record")
    force: bool = Field(default=False, description="restart even with live nodes or work queued")


class RequeueBody(Body):
    """``clustersync dead --requeue`` options: the ids, or every dead letter."""

    ids: list[str] = Field(default_factory=list, max_length=10_000)
    all: bool = False

    @model_validator(mode="after")
    def _ids_or_all(self) -> RequeueBody:
        if self.all == bool(self.ids):
            raise ValueError("give the dead letters' `ids`, or `all: true`")
        return self
