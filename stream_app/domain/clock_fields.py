"""Descriptions of the public clock's fields on the journal records (stream_app.domain.models;
the topic contracts in deploy/schemas/ are built from them)."""

CLOCK_TS = "When the worker published it: seconds since the Unix epoch (its own clock)."
WINDOW = (
    "Privacy window of the charge, floor(tick x release_period_seconds / "
    "budget_window_seconds), the window of the tick's due time: the budget renews each window. "
    "Null (or absent, in older records) when budget_window_seconds is not set."
)
TICK = (
    "The public clock's tick: due at tick x release_period_seconds seconds since the Unix "
    "epoch. One release per tick while the budget lasts (a late tick is published late, never "
    "dropped); a missing number is a tick due while no worker ran (an outage). Null in records "
    "older than this field."
)
ROUND_TICK = ("The public clock's tick whose round this is (core.plan.learning_due); null in "
              "older records.")
ROUNDS = (
    "R: the learning rounds whose radii the guarantee relies on so far, in the horizon of "
    "pufferfish plan (without windows: every round; with windows: this window's, plus 1 for "
    "the round in force when it opened); 0 with declared priors."
)
FAILURE = (
    "Cumulative failure probability so far: min(1, groups x learning_rounds x "
    "prior_confidence_beta), the probability that a learned radius misses its true law (0 with "
    "declared priors, and in older records)."
)
