"""Both release mechanisms at one window budget: what ``pufferfish plan`` prints and what
``python -m bench continual`` compares with the empirical RMSE (docs/privacy.md, "Continual
release: the tree mechanism"; docs/design.md, "Continual release: wiring the tree").

A privacy window of T ticks has ``budget_total``; its learning rounds are charged as always
(epsilon_learn each, at most R in any window), and the releases get the rest,
epsilon_r = budget_total - R x epsilon_learn (``release_budget``). ``tree``: one tree over the
window's ticks at budget epsilon_r (core.tree.tree_mechanism, arity picked by predicted noise).
``independent`` at the same budget: T releases of epsilon_r / T each
(core.tree.independent_noise_sd). A day meets ``windows_per_day`` epoch-aligned windows, so the
loss over a UTC day is at most that many times budget_total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from pufferfish_core import validation
from pufferfish_core.budget import exact_decimal
from pufferfish_core.tree import TreeMechanism, independent_noise_sd

DAY_SECONDS = 86_400


@dataclass(frozen=True)
class MechanismComparison:
    """The tree and independent releases over one window of ``ticks`` ticks at ``epsilon``."""

    ticks: int
    epsilon: float  # the window's release budget epsilon_r
    tree: TreeMechanism
    noise_sd_independent: float

    @property
    def noise_sd_tree(self) -> float:
        return self.tree.noise_sd()


def compare_mechanisms(tree: TreeMechanism) -> MechanismComparison:
    """Per-release noise sd of both mechanisms spending the tree's budget over its window's
    ticks (the tree: core.tree.tree_mechanism)."""
    ticks = tree.shape.ticks
    return MechanismComparison(ticks, tree.epsilon, tree, independent_noise_sd(
        ticks, tree.spread, tree.epsilon, tree.grid_log2))


def release_budget(budget_total: float, learning_rounds: int,
                   epsilon_learn: float | None) -> float:
    """epsilon_r = budget_total - learning_rounds x epsilon_learn on the settings' exact
    decimals, rounded down to a float whose decimal is at most that (so the accountant, which
    adds decimals exactly, never finds the window over budget); 0 or less: the learning rounds
    leave nothing for the releases."""
    total = exact_decimal(validation.positive(budget_total, "budget_total"))
    rounds = validation.count(learning_rounds, "learning_rounds")
    learn = Fraction(0) if epsilon_learn is None or rounds == 0 else exact_decimal(
        validation.positive(epsilon_learn, "epsilon_learn"))
    left = total - rounds * learn
    out = float(left)
    while out > 0 and exact_decimal(out) > left:
        out = math.nextafter(out, 0.0)
    return out


def windows_per_day(window_seconds: float) -> int:
    """The most epoch-aligned windows of ``window_seconds`` one UTC day meets: with g =
    gcd(day, W) on exact decimals, a day starts at most W - g into a window, so it meets
    1 + ceil((day - g) / W) windows (day / W when W divides a day, 1 when a day divides W)."""
    size = exact_decimal(validation.positive(window_seconds, "budget_window_seconds"))
    den = size.denominator
    day, width = DAY_SECONDS * den, size.numerator
    return 1 + -(-(day - math.gcd(day, width)) // width)
