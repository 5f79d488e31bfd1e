"""The tree mechanism for continual release within a privacy window, with its privacy map
(docs/privacy.md, "Continual release: the tree mechanism"; OpenDP's Measurement, like
core/plan.py ``ReleasePlan``).

Within a window of T ticks the release at tick t is the base plus the nodes of t's prefix
(core/tree_shape.py), each drawn **once** with discrete Laplace noise of one scale theta
(core/noise.py, CSPRNG), so it equals S_t plus the sum of those draws. The node vector has L1
sensitivity Delta under the coupling of user i's data (core/tree_sensitivity.py), so the
density ratio of all the window's draws is at most e^{Delta/theta} for every coupled pair:
the window's charge is Delta/theta, and for a window budget epsilon theta = Delta/epsilon.
The scale is fixed when the window opens, from the spread of the laws in force then; laws
learned during the window take effect at the next one.

``independent_noise_sd`` is today's mechanism at the same budget: T releases each charged
spread/theta_ind, so theta_ind = T * spread / epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pufferfish_core import validation
from pufferfish_core.budget import composition_charge
from pufferfish_core.error_bars import ErrorBar, error_bar
from pufferfish_core.noise import discrete_laplace_sd, discrete_laplace_units
from pufferfish_core.tree_sensitivity import window_sensitivity
from pufferfish_core.tree_shape import BASE_ID, TreeShape
from pufferfish_core.vocabulary import PairKind

MAX_ARITY = 16


@dataclass(frozen=True)
class TreeMechanism:
    """One window's tree: its nodes, its node scale and its charge."""

    shape: TreeShape
    max_changes: int  # w: admitted changes of one user's contribution per window
    sensitivity: float  # Delta: L1 sensitivity of the node vector
    scale: float  # theta of every draw (base and nodes)
    epsilon: float  # the window's budget for its releases
    spread: float  # the release plan's spread (the base node's own sensitivity)
    grid_log2: int

    @property
    def mechanism(self) -> str:
        return "tree"

    def charge(self) -> float:
        """The whole window's loss: max(epsilon, Delta/theta) (pointwise, every coupled pair)."""
        return composition_charge(self.sensitivity, self.scale, self.epsilon)

    def draws(self, tick: int) -> list[str]:
        """Ids of the draws the release at ``tick`` adds up: the base, then its prefix nodes
        (none when w = 0: no contribution may change, every increment is exactly 0)."""
        if self.max_changes == 0:
            validation.index(tick, self.shape.ticks, "tick")
            return [BASE_ID]
        return [BASE_ID, *(node.node_id for node in self.shape.cover(tick))]

    def draws_per_tick(self) -> np.ndarray:
        if self.max_changes == 0:
            return np.ones(self.shape.ticks, dtype=np.int64)
        return self.shape.draws_per_tick()

    def node_sd(self) -> float:
        return discrete_laplace_sd(self.scale, self.grid_log2)

    def noise_sd_at(self, tick: int) -> float:
        return self.node_sd() * math.sqrt(len(self.draws(tick)))

    def error_bar_at(self, tick: int) -> ErrorBar:
        """sd and 95 % half-width of the release at ``tick``: the sum of its draws, so they
        differ from tick to tick (core/error_bars.py)."""
        return error_bar(self.scale, self.grid_log2, len(self.draws(tick)))

    def noise_sd(self) -> float:
        """Root mean square over the window's ticks of each release's noise sd."""
        return self.node_sd() * math.sqrt(float(self.draws_per_tick().mean()))

    def draw_units(self) -> int:
        """One draw's noise in grid units (exact sampler, CSPRNG)."""
        return discrete_laplace_units(0, self.scale, self.grid_log2)


def _scale(sensitivity: float, epsilon: float) -> float:
    """The smallest float theta >= Delta/epsilon whose charge Delta/theta is <= epsilon."""
    if sensitivity == 0:
        return 0.0
    theta = sensitivity / epsilon
    while sensitivity / theta > epsilon:
        theta = math.nextafter(theta, math.inf)
    return theta


def tree_mechanism(
    ticks: int,
    max_changes: int,
    kinds: Iterable[PairKind],
    spread: float,
    domain: Sequence[float],
    epsilon: float,
    grid_log2: int = -10,
    arity: int | None = None,
    also: Sequence[tuple[Iterable[PairKind], float]] = (),
) -> TreeMechanism:
    """The tree of a window of ``ticks`` ticks at budget ``epsilon``; ``arity`` None picks the
    arity 2..MAX_ARITY with the smallest predicted noise_sd (the first on a tie). ``also``:
    further (pair kinds, spread) readings the tree must cover (its sensitivity is the largest;
    a group's sum tree whose law is secret too, core/group_tree.py)."""
    kinds = list(kinds)
    readings = [(list(k), validation.nonnegative(x, "spread")) for k, x in also]
    max_changes = validation.count(max_changes, "max_changes_per_window")
    epsilon = validation.positive(epsilon, "epsilon")
    spread = validation.nonnegative(spread, "spread")
    validation.grid_log2(grid_log2)
    arities = range(2, MAX_ARITY + 1) if arity is None else [validation.at_least(arity, 2,
                                                                                 "arity")]
    best: TreeMechanism | None = None
    for k in arities:
        shape = TreeShape(ticks, k)
        delta = max([window_sensitivity(shape, max_changes, kinds, spread, domain),
                     *(window_sensitivity(shape, max_changes, k, x, domain)
                       for k, x in readings)])
        tree = TreeMechanism(shape, max_changes, delta, _scale(delta, epsilon), epsilon, spread,
                             grid_log2)
        if best is None or tree.noise_sd() < best.noise_sd():
            best = tree
        if max_changes == 0:
            break  # no nodes: the arity does not matter
    assert best is not None
    return best


def independent_noise_sd(ticks: int, spread: float, epsilon: float, grid_log2: int = -10) -> float:
    """Noise sd of each of ``ticks`` independent releases whose charges add up to ``epsilon``."""
    ticks = validation.at_least(ticks, 1, "ticks")
    theta = ticks * validation.nonnegative(spread, "spread") / validation.positive(
        epsilon, "epsilon")
    return discrete_laplace_sd(theta, grid_log2)
