"""The records the worker publishes for analysts: releases and learning rounds (their JSON
Schemas: ``pufferfish schema``). Every field is a function of the settings, the public clock,
the published laws and fresh noise (docs/privacy.md, "Published fields")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from stream_app.domain.clock_fields import CLOCK_TS, FAILURE, ROUND_TICK, ROUNDS, TICK, WINDOW
from stream_app.domain.wire import Wire


class GroupResult(Wire):
    """One configured group's part of a release (release_by_group; docs/privacy.md,
    "Per-group releases"): its noisy sum and noisy count, each with its error bar."""

    noisy_sum: float = Field(
        description="The sum of the group's present users' newest reported values plus "
        "discrete Laplace noise of scale theta on the 2^grid_log2 grid.")
    theta: float = Field(gt=0, description="The noise scale of noisy_sum, calibrated on the "
                         "group's own published law (core/group_plan.py).")
    noise_sd: float = Field(ge=0, description="Standard deviation of noisy_sum's noise.")
    ci95_half_width: float = Field(
        ge=0, description="noisy_sum +- this covers the group's exact sum with probability "
        "at least 95 %.")
    noisy_count: float = Field(
        description="The number of the group's present users plus discrete Laplace noise of "
        "scale count_theta on the grid (may be negative or fractional: noise).")
    count_theta: float = Field(gt=0, description="The noise scale of noisy_count.")
    count_noise_sd: float = Field(ge=0, description="Standard deviation of noisy_count's noise.")
    count_ci95_half_width: float = Field(
        ge=0, description="noisy_count +- this covers the exact count with probability at "
        "least 95 %.")


class Release(Wire):
    """One noisy sum and its budget charge (topic ``releases``, the budget journal)."""

    seq: int = Field(ge=1, description="Release number: 1, 2, ... in publication order, never "
                     "reused (the journal's order, across restarts).")
    ts: float = Field(description=CLOCK_TS)
    noisy_sum: float = Field(
        description="The sum of the present users' newest reported values plus discrete "
        "Laplace noise of scale theta on the 2^grid_log2 grid (with groups: the sum of the "
        "groups' noisy sums, no draw of its own).")
    theta: float = Field(
        ge=0, description="Laplace noise scale, calibrated from public inputs only (the "
        "settings and the published laws), never from the data.")
    epsilon: float = Field(gt=0, description="The configured epsilon per release.")
    epsilon_spent: float = Field(
        ge=0, description="Budget spent so far (in this window, if any), releases and learning "
        "rounds together, this release's charge included.")
    epsilon_remaining: float = Field(
        description="budget_total - epsilon_spent (at least 0).")
    pairs: list[str] = Field(
        description="The secret pairs protected: value_change, value_presence, "
        "distribution_presence, distribution_change.")
    rule: str = Field(
        description="The calibration rule: kantorovich, exact, bound or relaxed.")
    binding_pair: str | None = Field(
        default=None, description="The pair whose theta is the largest (it sets theta); "
        "null: no pair needs noise.")
    binding_group: str | None = Field(
        default=None, description="The group of binding_pair; null: none.")
    priors_seq: int = Field(
        default=0, ge=0, description="The learning round (seq on topic priors) whose laws "
        "theta was calibrated on; 0: the configured laws, before any round. Tree mode: the "
        "round in force when the window opened (a round learned during the window calibrates "
        "the next one).")
    charge: float = Field(
        default=0.0, ge=0, description="Epsilon this release spent: max(epsilon, "
        "spread / theta); with mechanism tree, the window's whole charge on its first release "
        "and 0 after (0 in records older than this field).")
    window: int | None = Field(default=None, description=WINDOW)
    tick: int | None = Field(default=None, ge=0, description=TICK)
    learning_rounds: int = Field(default=0, ge=0, description=ROUNDS)
    failure_probability: float = Field(default=0.0, ge=0, le=1, description=FAILURE)
    mechanism: Literal["independent", "tree"] = Field(
        default="independent", description="release_mechanism: independent (each release "
        "noised and charged on its own) or tree (one tree of noisy nodes per privacy window: "
        "theta is the node scale, charge the window's on its first release, 0 after).")
    window_tick: int | None = Field(
        default=None, ge=0, description="tree: the tick's index in its window, tick minus the "
        "window's first tick; null for independent releases.")
    nodes: list[str] | None = Field(
        default=None, description="tree: the draws this release adds to the exact sum, 'base' "
        "and 'level.index' ids, a function of window_tick, the window's ticks and arity; the "
        "same id in one window is the same draw. Null for independent releases.")
    arity: int | None = Field(
        default=None, ge=2, description="tree: the tree's arity (2..16, the least predicted "
        "noise for the window's ticks, max_changes_per_window and the spread); null otherwise.")
    max_changes_per_window: int | None = Field(
        default=None, ge=0, description="tree: w, the public bound on how often one user's "
        "contribution may change per window (later changes wait for the next window); null "
        "for independent releases.")
    noise_sd: float | None = Field(
        default=None, ge=0, description="Standard deviation of the noise in noisy_sum: the "
        "discrete Laplace sd of scale theta on the 2^grid_log2 grid times the square root of "
        "the draws it adds (1; tree: the ids in nodes, so it differs per window_tick). A "
        "function of theta, the grid and nodes only. Null in records older than this field.")
    ci95_half_width: float | None = Field(
        default=None, ge=0, description="noisy_sum +- this covers the exact sum with "
        "probability at least 95 % (exact tail of the sum of the draws' Laplace laws plus one "
        "grid step per draw: never narrower than the discrete noise's own 95 % interval). A "
        "function of theta, the grid and nodes only. Null in records older than this field.")
    groups: dict[str, GroupResult] | None = Field(
        default=None, description="release_by_group: every configured group's noisy sum and "
        "noisy count with their error bars (the group list is the settings'); noisy_sum is "
        "then the sum of the groups' noisy sums (no draw of its own), noise_sd and "
        "ci95_half_width are those of that sum, theta is the largest group's and "
        "binding_group that group. Absent (not null) when release_by_group is off.")

    @model_serializer(mode="wrap")
    def _without_absent_groups(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """release_by_group off: the record's bytes are those of a release without the field."""
        out: dict[str, Any] = handler(self)
        if out.get("groups", 0) is None:
            del out["groups"]
        return out


class PriorsRecord(Wire):
    """One group's law in one learning round (topic ``priors``; seq 0 = the settings' laws)."""

    seq: int = Field(ge=1, description="Learning round number: 1, 2, ...; one record per "
                     "configured group per round, all with the round's seq.")
    ts: float = Field(description=CLOCK_TS)
    group: str = Field(description="The configured group whose law this is.")
    support: list[float] = Field(
        description="The values of the law, sorted, within the configured domain.")
    probs: list[float] = Field(
        description="The probability of each support value (same length; sums to 1).")
    epsilon_learn: float = Field(gt=0, description="Epsilon charged for this round.")
    epsilon_spent: float = Field(
        ge=0, description="Budget spent after this round's charge (in this window, if any).")
    radius: float = Field(
        default=0.0, ge=0, le=2, description="L1 radius around probs that holds the true law "
        "with probability at least 1 - prior_confidence_beta (2: anything); theta is robust "
        "over it.")
    status: Literal["learned", "low_mass", "void"] = Field(
        default="learned", description="learned: a new law; low_mass (noisy mass below "
        "learn_min_mass) or void (noisy mass within the noise tail): the previous law and "
        "radius are kept.")
    window: int | None = Field(default=None, description=WINDOW)
    tick: int | None = Field(default=None, ge=0, description=ROUND_TICK)


