"""L1 sensitivity of the tree mechanism's node vector under the coupling of user i's data
(docs/privacy.md, "Continual release: the tree mechanism", which proves every claim here).

User i's **admitted** contribution at the window's ticks is c_0..c_n (``admitted``: at most
w = ``max_changes_per_window`` changes after the base; later changes wait for the next window's
base). Under the coupled data of s and s' (the others' data fixed), delta_t = c_t - c'_t; the
base moves by delta_0 (``base_bound``: changes consumed between the roll and the window's first
read are admitted, so two-world pairs reach span(D0) there), node (a, b] by
delta_b - delta_a. For value and presence pairs c and c' change together or one is always 0,
so delta lies in a range [low, high] containing 0 and changes at most w times
(``coupled_range``); for distribution_change each world does so on its own.

``node_sensitivity`` is the exact maximum of |delta_0| + sum over nodes |delta_b - delta_a| over
every such delta: the objective is convex in the values delta takes between its changes, so
the maximum is at the ends of their ranges; a dynamic programme over the tree's blocks (left
and right boundary value, changes inside) finds it. distribution_change pairs bound each world
on its own (``range_sensitivity``). ``level_bound`` is the closed form none exceeds:
base_bound + node_move * sum over levels of min(w, nodes of that level).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pufferfish_core import validation
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.tree_shape import TreeShape, digits
from pufferfish_core.validation import FloatArray
from pufferfish_core.vocabulary import PairKind

NEG = -math.inf
DP_MAX_CHANGES = 64


def admitted(raw: Sequence[float], max_changes: int) -> list[float]:
    """The contribution the window's releases see at ticks 0..n, from the raw one (the latest
    value while present, else 0): the raw value at the base (tick 0), then every change of the
    raw value while fewer than ``max_changes`` were admitted; after that the last admitted value
    stays until the next window's base (the learning histogram still counts every report)."""
    max_changes = validation.count(max_changes, "max_changes_per_window")
    out: list[float] = []
    used = 0
    for value in raw:
        if out and value != out[-1]:
            if used == max_changes:
                value = out[-1]
            else:
                used += 1
        out.append(value)
    return out


@dataclass(frozen=True)
class CoupledRange:
    """What the coupling allows for one pair kind. worlds 1: delta_t itself lies in
    [low, high] and changes at most w times; worlds 2: each world's admitted contribution lies
    in [low, high] and changes at most w times, at ticks of its own (delta may change 2w times).
    Always low <= 0 <= high; the first read's bound is ``base_bound``'s."""

    low: float
    high: float
    worlds: int = 1

    @property
    def node_move(self) -> float:
        """The most one node can move: |delta_b - delta_a|."""
        return self.worlds * (self.high - self.low)


def coupled_range(kind: PairKind, spread: float, domain: Iterable[float]) -> CoupledRange:
    """The coupled range of one pair kind (docs/privacy.md, "Continual release", Lemma 1).

    Value pairs: c and c' change at the same events (both values nonzero) or one is always 0,
    so delta is 0 or one difference of one sign, |.| <= spread: [0, spread] up to a reflection,
    which leaves the sensitivity unchanged. distribution_presence: c' = 0, c in the domain, so
    [max(min D0, -spread), min(max D0, spread)], D0 = domain + {0}. distribution_change: the
    two worlds may hold changes from different ticks on, so each is bounded on its own: D0.
    """
    spread = validation.nonnegative(spread, "spread")
    points = validation.finite_vector([0.0, *domain], "domain")
    low, high = float(points.min()), float(points.max())
    if kind in (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE):
        return CoupledRange(0.0, spread)
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return CoupledRange(max(low, -spread), min(high, spread))
    return CoupledRange(low, high, worlds=2)


def _chain(first: FloatArray, second: FloatArray) -> FloatArray:
    """Two adjacent blocks as one, from [left value, right value, changes] tables:
    out[a, b, c] = max over the middle value s and i <= c of first[a, s, i] + second[s, b, c - i]
    (at most c changes, split between the blocks)."""
    size = first.shape[2]
    out = np.full(first.shape, NEG)
    for i in range(size):
        cand = first[:, :, i][:, :, None, None] + second[None, :, :, : size - i]  # a, s, b, c
        out[:, :, i:] = np.maximum(out[:, :, i:], cand.max(axis=1))
    return out


def _node_sums(
    shape: TreeShape, changes: int, low: float, high: float, first: tuple[float, float]
) -> FloatArray:
    """For each end of the first segment's range ``first``: the max over sequences in
    {low, high} after it, with at most ``changes`` changes, of the sum over the nodes of
    |value_end - value_start|.

    Values: 0 = low, 1 = high for the segments after a change; 2, 3 = the ends of ``first``,
    the first segment's range, left only by a change."""
    values = np.array([low, high, *first])
    jump = np.abs(values[None, :] - values[:, None])[:, :, None]
    leaf = np.zeros((4, 4, changes + 1))
    leaf[:, :, 0] = np.where(np.eye(4, dtype=bool), 0.0, NEG)  # a change needs one
    leaf[:, 2:, :] = np.where(np.eye(4, dtype=bool)[:, 2:, None], 0.0, NEG)  # never re-entered
    blocks = [leaf]  # blocks[l]: the best sum of the nodes strictly inside a level-l block
    k = shape.arity
    while k ** len(blocks) <= shape.increments:
        below = blocks[-1]
        block = below + jump
        for child in range(1, k):
            block = _chain(block, below + jump if child < k - 1 else below)
        blocks.append(block)
    whole: FloatArray | None = None
    for level, digit in reversed(list(enumerate(digits(shape.increments, k)))):
        for _ in range(digit):
            part = blocks[level] + jump
            whole = part if whole is None else _chain(whole, part)
    assert whole is not None
    return whole[2:, :, changes].max(axis=1)  # type: ignore[no-any-return]


def node_sensitivity(
    shape: TreeShape, max_changes: int, low: float, high: float, base: float | None = None
) -> float:
    """max |delta_0| + sum over the nodes |delta_end - delta_start| over delta in
    [low, high] with at most ``max_changes`` changes and |delta_0| <= ``base`` (None:
    max(-low, high)): the base is read before any change is held, so the coupling bounds it by
    the spread even where later differences range wider."""
    max_changes = validation.count(max_changes, "max_changes_per_window")
    low, high = validation.real(low, "low"), validation.real(high, "high")
    if not low <= 0.0 <= high:
        raise PufferfishInputError("range", "must satisfy low <= 0 <= high")
    base = max(-low, high) if base is None else validation.nonnegative(base, "base")
    first = (max(low, -base), min(high, base))
    changes = min(max_changes, shape.increments)
    if changes == 0:
        return max(-first[0], first[1])
    sums = _node_sums(shape, changes, low, high, first)
    return float(np.max(np.abs(np.array(first)) + sums))


def base_bound(coupled: CoupledRange, spread: float, max_changes: int) -> float:
    """The most |delta_0| (the window's first read) can be on the worker (docs/privacy.md,
    "Continual release", Lemma 1). A partition rolls into the window ``lead`` seconds before
    its first tick, and changes consumed before that tick's read are admitted: the first read
    is not the coupled pair of the roll. One world: delta stays in its range at every tick, so
    |delta_0| <= min(spread, max(-low, high)). Two worlds: each may have changed before the
    first read (w >= 1), so only c_0, c'_0 in D0 hold: span(D0) = high - low; with w = 0
    nothing changes after the roll, whose pair is coupled: min(spread, high - low)
    (the one-tick window of issue 42 moved by span(D0) against a charge of the spread)."""
    spread = validation.nonnegative(spread, "spread")
    if coupled.worlds == 1:
        return min(spread, max(-coupled.low, coupled.high))
    span = coupled.high - coupled.low
    return span if validation.count(max_changes, "max_changes_per_window") >= 1 \
        else min(spread, span)


def range_sensitivity(
    shape: TreeShape, max_changes: int, coupled: CoupledRange, spread: float
) -> float:
    """The node vector's L1 sensitivity for one coupled range. Two worlds: by the triangle
    inequality |delta_b - delta_a| <= |c_b - c_a| + |c'_b - c'_a|, so ``base_bound`` plus
    twice the node sum of one world's sequence in [low, high] with at most w changes. Beyond
    DP_MAX_CHANGES changes the programme's cost (quadratic in w) buys little: ``level_bound``,
    never below the programme (tests/core/test_tree_sensitivity.py) and within a few percent
    of it there, is charged instead."""
    if min(max_changes, shape.increments) > DP_MAX_CHANGES:
        return level_bound(shape, max_changes, coupled, spread)
    base = base_bound(coupled, spread, max_changes)
    if coupled.worlds == 1:
        return node_sensitivity(shape, max_changes, coupled.low, coupled.high, base)
    changes = min(validation.count(max_changes, "max_changes_per_window"), shape.increments)
    if changes == 0:
        return base
    sums = _node_sums(shape, changes, coupled.low, coupled.high, (coupled.low, coupled.high))
    return base + 2.0 * float(sums.max())


def level_bound(
    shape: TreeShape, max_changes: int, coupled: CoupledRange, spread: float
) -> float:
    """Closed-form upper bound: ``base_bound`` + node_move * sum over levels of min(w, nodes
    there) (each level's nodes are disjoint: a node moves only if it holds a change, by at most
    node_move; two worlds: min(w, m) per world, so twice (high - low) each). It bounds every
    term of the programme's objective, so it is never below ``range_sensitivity``'s programme."""
    max_changes = validation.count(max_changes, "max_changes_per_window")
    changes = min(max_changes, shape.increments)
    base = base_bound(coupled, spread, max_changes)
    return base + coupled.node_move * sum(min(changes, m) for m in shape.nodes_per_level())


def window_sensitivity(
    shape: TreeShape, max_changes: int, kinds: Iterable[PairKind], spread: float,
    domain: Sequence[float],
) -> float:
    """The node vector's L1 sensitivity: the max over the configured pair kinds."""
    ranges = {coupled_range(kind, spread, domain) for kind in kinds}
    validation.non_empty(list(ranges), "pairs")
    return max(range_sensitivity(shape, max_changes, r, spread) for r in ranges)
