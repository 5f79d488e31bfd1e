"""L1 sensitivity of the tree mechanism's node vector under the coupling of user i's data
(docs/privacy.md, "Continual release: the tree mechanism", which proves every claim here).

User i's **admitted** contribution at the window's ticks is c_0..c_n (``admitted``: at most
w = ``max_changes_per_window`` changes after the base; later changes wait for the next window's
base). Under the coupled data of s and s', delta_t = c_t - c'_t lies in a range [low, high] that
contains 0 (``coupled_range``) and changes at most w times, because each of c and c' does and
the others' data is fixed. The base moves by delta_0, node (a, b] by delta_b - delta_a.

``node_sensitivity`` is the exact maximum of |delta_0| + sum over nodes |delta_b - delta_a| over
every such delta: the objective is convex in the values delta takes between its changes, so
the maximum is at values in {low, high}; a dynamic programme over the tree's blocks (left and
right boundary value, changes inside) finds it. ``level_bound`` is the closed form it never
exceeds: max(|low|, high) + (high - low) * sum over levels of min(w, nodes of that level).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from core import validation
from core.errors import PufferfishInputError
from core.tree_shape import TreeShape, digits
from core.validation import FloatArray
from core.vocabulary import PairKind

NEG = -math.inf


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


def coupled_range(kind: PairKind, spread: float, domain: Iterable[float]) -> tuple[float, float]:
    """[low, high] holding delta_t = c_t - c'_t for every coupled pair of one pair kind.

    Value pairs: c and c' change at the same events (both nonzero) or one is always 0, so
    delta is 0 or one difference of one sign, |.| <= spread: [0, spread] up to a reflection,
    which leaves the sensitivity unchanged. distribution_presence: c' = 0, c in the domain, so
    [max(min D0, -spread), min(max D0, spread)], D0 = domain + {0}. distribution_change: the
    two worlds may freeze at different ticks, so c and c' are any two points of D0.
    """
    spread = validation.nonnegative(spread, "spread")
    points = validation.finite_vector([0.0, *domain], "domain")
    low, high = float(points.min()), float(points.max())
    if kind in (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE):
        return 0.0, spread
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return max(low, -spread), min(high, spread)
    return low - high, high - low


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


def node_sensitivity(
    shape: TreeShape, max_changes: int, low: float, high: float, base: float | None = None
) -> float:
    """max |delta_0| + sum over the nodes |delta_end - delta_start| (module docstring), with
    |delta_0| <= ``base`` (None: max(-low, high)): the base is read before any change, so the
    coupling bounds it by the spread even where later differences range wider.

    Values: 0 = low, 1 = high for the segments after a change; 2 = low0, 3 = high0, the ends
    of the first segment's range [max(low, -base), min(high, base)], left only by a change."""
    max_changes = validation.count(max_changes, "max_changes_per_window")
    low, high = validation.real(low, "low"), validation.real(high, "high")
    if not low <= 0.0 <= high:
        raise PufferfishInputError("range", "must satisfy low <= 0 <= high")
    base = max(-low, high) if base is None else validation.nonnegative(base, "base")
    first = (max(low, -base), min(high, base))
    changes = min(max_changes, shape.increments)
    if changes == 0:
        return max(-first[0], first[1])
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
    return float(np.max(np.abs(values[2:]) + whole[2:, :, changes].max(axis=1)))


def level_bound(
    shape: TreeShape, max_changes: int, low: float, high: float, base: float | None = None
) -> float:
    """Closed-form upper bound: base + (high - low) * sum_l min(w, nodes at l)."""
    max_changes = validation.count(max_changes, "max_changes_per_window")
    per_level: dict[int, int] = {}
    for node in shape.nodes():
        per_level[node.level] = per_level.get(node.level, 0) + 1
    changes = min(max_changes, shape.increments)
    first = max(-low, high) if base is None else min(base, max(-low, high))
    return first + (high - low) * sum(min(changes, m) for m in per_level.values())


def window_sensitivity(
    shape: TreeShape, max_changes: int, kinds: Iterable[PairKind], spread: float,
    domain: Sequence[float],
) -> float:
    """The node vector's L1 sensitivity: the max over the configured pair kinds."""
    ranges = {coupled_range(kind, spread, domain) for kind in kinds}
    validation.non_empty(list(ranges), "pairs")
    return max(node_sensitivity(shape, max_changes, low, high, spread) for low, high in ranges)
