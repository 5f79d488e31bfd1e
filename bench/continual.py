"""Continual release: the tree mechanism vs independent releases at the same window budget.

A population of 10,000 users holds values of the UCI adult ``education-num`` column (domain
1..16, pairs value_change + value_presence, so spread 16 from ``core.plan.release_plan``); in
each window of T ticks every user changes its value w times, at random ticks, to another row of
the column. Both mechanisms spend the window budget epsilon = 1: ``independent`` T releases at
theta = T * spread / epsilon each, ``tree`` one tree (``core.tree.tree_mechanism``, arity
picked by its predicted noise; the binary tree beside it) whose release at tick t is computed
from the exact node values S_end - S_start plus one draw per node, as the worker does. The
empirical RMSE is over every tick of R windows; beside it, ``pufferfish plan``'s prediction
from the function ``plan`` calls (core.tree_plan.compare_mechanisms): ``noise_sd_tree`` and
``noise_sd_independent``. The noise is numpy's discrete Laplace on the same grid (the
difference of two geometric draws, the same law as the CSPRNG sampler, which the worker uses
and which is too slow for millions of draws).

Beside them, a lower bound on the RMSE of the square-root matrix factorization (Fichtenberger,
Henzinger, Upadhyay, "Constant matters"; the Toeplitz factor R = L with c_k = C(2k, k) / 4^k,
L R = the prefix-sum matrix over the window's increments) at the same budget under pure DP
(Laplace noise on R x, scale Delta_R / epsilon): Delta_R is at least spread x ||R d||_1 for
admitted trajectories d (present with the top value all window; and with w leaves and
re-joins evenly spaced), and the
noise of the release at tick t has variance 2 theta^2 sum_{k <= t} c_k^2, exactly; the column is
the root mean of that over the window's ticks (no sampling needed: it does not depend on the
data). A bound in the factorization's favour: its true Delta_R with w changes is larger.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
from scipy import sparse

from bench import _common
from pufferfish_core.distribution import Distribution
from pufferfish_core.plan import release_plan
from pufferfish_core.tree import TreeMechanism, tree_mechanism
from pufferfish_core.tree_plan import compare_mechanisms
from pufferfish_core.tree_shape import TreeShape
from pufferfish_core.vocabulary import PairKind, Rule

NAME = "continual"
USERS = 10_000
EPSILON = 1.0
GRID_LOG2 = -10
KINDS = (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE)
TICKS = (360, 8_640)
CHANGES = (0, 1, 4, 16)


def column() -> np.ndarray:
    from pufferfish_data import adult_education_num

    return adult_education_num()


def exact_sums(values: np.ndarray, ticks: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """S_0..S_{T-1} of one window: each user starts at a row and changes w times."""
    users = rng.choice(values, size=USERS)
    sums = np.zeros(ticks, dtype=np.int64)
    sums[0] = users.sum()
    if w and ticks > 1:
        when = np.sort(rng.integers(1, ticks, size=(USERS, w)), axis=1)
        new = rng.choice(values, size=(USERS, w))
        old = np.concatenate([users[:, None], new[:, :-1]], axis=1)
        np.add.at(sums, when.ravel(), (new - old).ravel())
    return np.cumsum(sums)


def discrete_laplace(theta: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    grid = 2.0**GRID_LOG2
    p = -np.expm1(-grid / theta)  # success probability: 1 - q
    return grid * (rng.geometric(p, size=shape) - rng.geometric(p, size=shape)).astype(float)


def incidence(tree: TreeMechanism) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray]:
    """Rows: ticks; columns: base then nodes; 1 where the release adds that draw. With each
    column's (start, end) ticks, so that node values are S[end] - S[start] (base: S[0])."""
    shape: TreeShape = tree.shape
    nodes = shape.nodes() if tree.max_changes else []
    column_of = {n.node_id: j + 1 for j, n in enumerate(nodes)}
    rows, cols = [], []
    for t in range(shape.ticks):
        for node in tree.draws(t):
            rows.append(t)
            cols.append(column_of.get(node, 0))
    matrix = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)),
                               shape=(shape.ticks, len(nodes) + 1))
    starts = np.array([0] + [n.start for n in nodes])
    ends = np.array([0] + [n.end for n in nodes])
    return matrix, starts, ends


def squared_errors(
    tree: TreeMechanism, sums: np.ndarray, rng: np.random.Generator,
    matrix: sparse.csr_matrix, starts: np.ndarray, ends: np.ndarray,
) -> tuple[float, float]:
    """Sums of squared errors over one window's ticks: the tree (from its node values and
    draws) and independent releases at the same budget."""
    values = (sums[ends] - np.where(np.arange(starts.size) == 0, 0, sums[starts])).astype(float)
    noisy = matrix @ (values + discrete_laplace(tree.scale, values.shape, rng))
    theta = sums.size * tree.spread / tree.epsilon
    independent = discrete_laplace(theta, sums.shape, rng)
    return float(np.sum((noisy - sums) ** 2)), float(np.sum(independent**2))


def rmse(trees: list[TreeMechanism], values: np.ndarray, w: int, windows: int,
         rng: np.random.Generator) -> tuple[list[float], float]:
    """Empirical RMSE of each tree and of independent releases over ``windows`` windows."""
    built = [incidence(t) for t in trees]
    totals, independent = [0.0] * len(trees), 0.0
    ticks = trees[0].shape.ticks
    for _ in range(windows):
        sums = exact_sums(values, ticks, w, rng)
        for j, (tree, parts) in enumerate(zip(trees, built, strict=True)):
            tree_sq, ind_sq = squared_errors(tree, sums, rng, *parts)
            totals[j] += tree_sq
            independent += ind_sq if j == 0 else 0.0
    count = windows * ticks
    return [math.sqrt(t / count) for t in totals], math.sqrt(independent / count)


def sqrt_factorization_rmse_floor(ticks: int, w: int, spread: float, epsilon: float) -> float:
    """A lower bound on the square-root factorization's RMSE over a window (module doc):
    Delta_R >= spread x ||R d||_1 for two admitted trajectories d of a user (value_presence):
    present with the top value all window, and the same with w leaves and re-joins evenly
    spaced (d alternates between spread and 0); the larger gives theta."""
    c = np.ones(ticks)
    for k in range(1, ticks):
        c[k] = c[k - 1] * (2 * k - 1) / (2 * k)
    moves = np.zeros(ticks)
    moves[0] = 1.0
    for j, t in enumerate(np.linspace(0, ticks, w + 2)[1:-1].astype(int)):
        moves[t] += -1.0 if j % 2 == 0 else 1.0
    norm = max(float(c.sum()), float(np.abs(np.convolve(c, moves)[:ticks]).sum()))
    theta = spread * norm / epsilon
    return math.sqrt(float(np.mean(2 * theta**2 * np.cumsum(c**2))))


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=None,
                   help="windows per cell (default 400 at T 360, 100 at 8,640; 10x at w 0)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    rng = np.random.default_rng(20261128)
    values = column()
    support, counts = np.unique(values, return_counts=True)
    law = Distribution.from_points(support.tolist(), (counts / counts.sum()).tolist())
    plan = release_plan({"adult": law}, KINDS, Rule.KANTOROVICH, EPSILON, GRID_LOG2)
    domain = [float(x) for x in range(1, 17)]
    ticks_list = (360,) if args.quick else TICKS
    rows, verdicts = [], []
    for ticks in ticks_list:
        for w in CHANGES:
            # w 0: one draw per window (the base), so many windows for a stable RMSE
            count = (args.windows or (20 if args.quick else 400 if ticks < 1000 else 100)) * (
                40 if w == 0 else 1)
            predicted = compare_mechanisms(tree_mechanism(ticks, w, KINDS, plan.spread, domain,
                                                          EPSILON, GRID_LOG2))
            tree = predicted.tree
            binary = tree_mechanism(ticks, w, KINDS, plan.spread, domain, EPSILON, GRID_LOG2,
                                    arity=2)
            (got, got2), ind = rmse([tree, binary], values, w, count, rng)
            want, want_ind = predicted.noise_sd_tree, predicted.noise_sd_independent
            off = abs(want - got) / got
            verdicts.append((ticks, w, ind / got, off))
            floor = sqrt_factorization_rmse_floor(ticks, w, plan.spread, EPSILON)
            rows.append((ticks, w, count, tree.shape.arity, tree.sensitivity, tree.scale,
                         got, want, f"{100 * off:.1f} %", got2, floor, ind, want_ind,
                         f"{ind / got:,.1f}x"))
    elapsed = time.perf_counter() - started
    headers = ("T", "w", "windows", "arity", "Delta", "node theta", "tree RMSE",
               "plan noise_sd_tree", "plan off by", "binary RMSE",
               "sqrt factorization RMSE >=", "independent RMSE",
               "plan noise_sd_independent", "independent / tree")
    print(_common.text_table(headers, rows))
    goal = [v for v in verdicts if v[:2] == (8_640, 4)]
    ok = bool(goal) and all(ratio >= 10 and off <= 0.10 for _, _, ratio, off in goal)
    verdict = "met" if ok else "NOT met" if goal else "not run (--quick)"
    print(f"goal at T 8,640, w 4 (tree RMSE >= 10x lower, noise_sd within 10 %): {verdict}; "
          f"{elapsed:.1f} s")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    body = (
        __doc__.split("\n", 1)[1].strip()
        + f"\n\nspread {plan.spread:g}, epsilon per window {EPSILON:g}, grid 2^{GRID_LOG2}, "
        f"{USERS:,} users; {elapsed:.0f} s"
        + f", load average (1/5/15 min) at the end {load}"
        + f"\n\nGoal at T 8,640, w 4 (tree RMSE >= 10x lower than independent, noise_sd "
        f"within 10 % of the tree's RMSE): {verdict}.\n\n"
        + _common.markdown_table(headers, rows) + "\n"
    )
    _common.report(args, NAME, "8. Continual release: tree vs independent",
                   _common.command_line(NAME, argv), body)
    return 0 if ok or not goal else 1


if __name__ == "__main__":
    raise SystemExit(main())
