"""The node set of the tree mechanism over one privacy window (docs/privacy.md, "Continual
release: the tree mechanism").

A window has T ticks 0..n (n = T - 1). Tick 0 carries the window's **base**, the exact sum S_0;
ticks 1..n add increments. With arity k >= 2, a **node** (level l, index j) covers the ticks
(j k^l, (j+1) k^l] and carries S_end - S_start. Only the nodes a prefix ever uses exist: those
inside (0, n] whose index is not the last child of its parent (j mod k != k - 1; the last child's
prefix is its parent). The prefix (0, t] is the base plus the nodes of t's base-k digits, from
the top: digit d_l gives d_l consecutive nodes of level l, so tick t uses 1 + digitsum_k(t) draws.
Pure combinatorics: no noise, no privacy map (core/tree.py holds those).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pufferfish_core import validation

BASE_ID = "base"


@dataclass(frozen=True, order=True, slots=True)
class Node:
    """Ticks (start, end] of a window: the node's exact value is S_end - S_start."""

    level: int
    index: int
    start: int
    end: int

    @property
    def node_id(self) -> str:
        return f"{self.level}.{self.index}"


def digits(value: int, arity: int) -> list[int]:
    """Base-``arity`` digits of ``value``, least significant first (0 -> [])."""
    out = []
    while value:
        value, digit = divmod(value, arity)
        out.append(digit)
    return out


@dataclass(frozen=True, slots=True)
class TreeShape:
    """The nodes of a window of ``ticks`` ticks in a tree of ``arity``."""

    ticks: int
    arity: int = 2

    def __post_init__(self) -> None:
        validation.at_least(self.ticks, 1, "ticks")
        validation.at_least(self.arity, 2, "arity")

    @property
    def increments(self) -> int:
        """n: the ticks after the base."""
        return self.ticks - 1

    def nodes(self) -> list[Node]:
        """Every node some prefix uses, by level then index."""
        k, n = self.arity, self.increments
        out: list[Node] = []
        size, level = 1, 0
        while size <= n:
            out += [Node(level, j, j * size, (j + 1) * size)
                    for j in range(n // size) if j % k != k - 1]
            size, level = size * k, level + 1
        return out

    def nodes_per_level(self) -> list[int]:
        """How many nodes each level has: floor(n / k^l) intervals minus the last children."""
        k, out, size = self.arity, [], 1
        while size <= self.increments:
            blocks = self.increments // size
            out.append(blocks - blocks // k)
            size *= k
        return out

    def cover(self, tick: int) -> list[Node]:
        """The nodes whose values add up to S_tick - S_0 (tick 0: none), from the top level."""
        tick = validation.index(tick, self.ticks, "tick")
        k = self.arity
        out: list[Node] = []
        start = 0
        for level, digit in reversed(list(enumerate(digits(tick, k)))):
            size = k**level
            for _ in range(digit):
                out.append(Node(level, start // size, start, start + size))
                start += size
        return out

    def draws_per_tick(self) -> np.ndarray:
        """1 + digitsum_k(t) for t = 0..n: the draws (base included) each release adds up."""
        t = np.arange(self.ticks, dtype=np.int64)
        total = np.ones(self.ticks, dtype=np.int64)
        while t.any():
            t, digit = np.divmod(t, self.arity)
            total += digit
        return total
