"""The public clock, how releases spend the budget and how they are delivered: the settings
every release field is a function of (docs/privacy.md, "Composition" and "Continual release:
the tree mechanism"), and the release owner's transactions ("Two concurrent release owners").

``Settings`` (model.py) inherits them; the checks between them live here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ReleaseSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PUFFERFISH_", extra="forbid")

    budget_total: float = Field(default=100.0, gt=0)
    # With a window, budget_total is the budget per user per window of the public clock
    # (window id = floor(ts / budget_window_seconds)); None: one budget for the deployment's life.
    budget_window_seconds: float | None = Field(default=None, gt=0)
    release_period_seconds: float = Field(default=10.0, gt=0, le=86400)
    # independent: every release charged on its own; tree: one tree per window over its ticks,
    # the window charged once (docs/design.md, "Continual release: wiring the tree").
    release_mechanism: Literal["independent", "tree"] = "independent"
    # w: how often one user's contribution to the sum may change per window (tree mode); changes
    # beyond it are held until the next window (pufferfish_tree_changes_held_total).
    max_changes_per_window: int = Field(default=4, ge=0, le=1_000_000)
    # per-group outputs: each release also carries every configured group's noisy sum and
    # noisy count, each group calibrated on its own law (core/group_plan.py); off: today's
    # records unchanged.
    release_by_group: bool = False

    # delivery (docs/privacy.md, "Two concurrent release owners"):
    # Each tick's records (learning round, node draws, release) in one Kafka transaction under
    # one transactional id for the releaser role, so that a new release owner fences the old
    # one. auto: transactions when the broker has them, else at-least-once (said at start);
    # required: never publish without them; off: at-least-once (stream_app/release/delivery.py).
    release_transactions: Literal["auto", "required", "off"] = "auto"
    # default "<app_id>-releaser"; every worker of the deployment must use the same one
    release_transactional_id: str | None = Field(default=None, min_length=1, max_length=249)

    @model_validator(mode="after")
    def _release_consistent(self) -> ReleaseSettings:
        window = self.budget_window_seconds
        if window is not None and window < self.release_period_seconds:
            raise ValueError(
                "budget_window_seconds: must be at least release_period_seconds "
                f"({self.release_period_seconds:g})"
            )
        if self.release_mechanism == "tree" and window is None:
            raise ValueError("budget_window_seconds: required with release_mechanism=tree "
                             "(the tree lives for one window)")
        if self.release_by_group and self.release_mechanism == "tree":
            raise ValueError("release_by_group: not available with release_mechanism=tree yet "
                             "(its per-group trees are not proven here); use independent")
        return self
