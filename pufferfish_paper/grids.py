"""Epsilon grids: the paper's own grids, optionally thinned or refined by ``--eps-grid N``."""

from __future__ import annotations

import numpy as np

from pufferfish_paper.paper_values import Curve as PrintedCurve

# Printed eps values are np.linspace rounded to 15 significant digits.
EPS_MATCH_RTOL = 1e-12


def paper_grid(printed: PrintedCurve) -> np.ndarray:
    """The linspace the paper evaluated on (its printed eps are this grid, rounded)."""
    eps = np.array([e for e, _ in printed])
    grid = np.linspace(eps[0], eps[-1], eps.size)
    if not np.allclose(grid, eps, rtol=EPS_MATCH_RTOL, atol=0.0):
        raise ValueError("printed eps column is not a linspace")
    return grid


def figure_grid(printed: PrintedCurve, n: int | None) -> np.ndarray:
    """n = None: the paper's grid. n <= its size: n evenly spaced paper points (ends kept),
    so every point can be compared to a printed value. n larger: a finer linspace plus
    the paper's points."""
    base = paper_grid(printed)
    if n is None or n == base.size:
        return base
    if n < base.size:
        idx = np.unique(np.round(np.linspace(0, base.size - 1, max(n, 2))).astype(int))
        picked: np.ndarray = base[idx]
        return picked
    return np.union1d(base, np.linspace(base[0], base[-1], n))


def printed_on(grid: np.ndarray, printed: PrintedCurve) -> np.ndarray:
    """The printed theta at each grid point (nan where the paper printed none)."""
    base = paper_grid(printed)
    values = np.array([t for _, t in printed])
    out = np.full(grid.size, np.nan)
    for k, e in enumerate(grid):
        hit = np.flatnonzero(np.isclose(base, e, rtol=EPS_MATCH_RTOL, atol=0.0))
        if hit.size:
            out[k] = values[hit[0]]
    return out
