"""The monotone (north-west-corner) Kantorovich plan of eq. (piStar) and its spread.

ERRATA 7: Proposition 1 needs this particular W1-optimal plan; other W1 minimisers can have
a larger support. ERRATA 5-6: Delta* is taken on the lattice of the supports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pufferfish_core.distribution import Distribution
from pufferfish_core.validation import FloatArray

# Plan cells with less mass than this are float noise from cumulative sums, not support.
MASS_TOL = 1e-14


@dataclass(frozen=True, slots=True)
class Plan:
    """pi*(x, x') on the union of both supports: ``matrix[x_index, x'_index]``."""

    points: FloatArray
    matrix: FloatArray


def _on_union(p: Distribution, q: Distribution) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Union of supports and both CDFs evaluated on it."""
    px, pp = p.arrays()
    qx, qp = q.arrays()
    points = np.union1d(px, qx)
    f = np.zeros(points.size)
    g = np.zeros(points.size)
    f[np.searchsorted(points, px)] = pp
    g[np.searchsorted(points, qx)] = qp
    f, g = np.minimum(np.cumsum(f), 1.0), np.minimum(np.cumsum(g), 1.0)
    f[-1] = g[-1] = 1.0
    return points, f, g


def monotone_plan(p: Distribution, q: Distribution) -> Plan:
    """pi*(x, x') = d^2/dx dx' min{F_P(x), F_Q(x')}, the quantile coupling.

    The mass of (x, x') is the length of the overlap of P's level interval (F_P(x-), F_P(x)]
    with Q's level interval (F_Q(x'-), F_Q(x')].
    """
    points, f, g = _on_union(p, q)
    f_prev = np.concatenate(([0.0], f[:-1]))
    g_prev = np.concatenate(([0.0], g[:-1]))
    overlap = np.minimum(f[:, None], g[None, :]) - np.maximum(f_prev[:, None], g_prev[None, :])
    matrix = np.where(overlap > MASS_TOL, overlap, 0.0)
    return Plan(points=points, matrix=matrix)


def plan_spread(p: Distribution, q: Distribution) -> float:
    """sup over supp(pi*) of |x - x'| (Proposition 1's numerator).

    Computed in O(K log K) from the quantile levels, without the K x K plan: every level
    interval between consecutive CDF values of either law is one plan cell.
    """
    px, pp = p.positive_arrays()
    qx, qp = q.positive_arrays()
    f, g = np.cumsum(pp), np.cumsum(qp)
    f[-1] = g[-1] = 1.0
    levels = np.union1d(f, g)
    below = np.concatenate(([0.0], levels[:-1]))
    cell = levels - below > MASS_TOL
    mid = 0.5 * (levels[cell] + below[cell])
    ip = np.minimum(np.searchsorted(f, mid), px.size - 1)
    iq = np.minimum(np.searchsorted(g, mid), qx.size - 1)
    return float(np.max(np.abs(px[ip] - qx[iq])))


def delta_star(p: Distribution, q: Distribution) -> dict[float, float]:
    """Delta*(x) of Lemma ComputePiStar for every x on the union lattice.

    F_P(x) > F_Q(x): the distance to the first lattice point x+D with F_Q(x+D) >= F_P(x)
    (the printed case 2). F_P(x) < F_Q(x): the mirror image, the distance to the first
    lattice point x+D with F_P(x+D) >= F_Q(x). The printed case 3 looks left of x and, on a
    lattice, describes no plan pair (P = delta_1, Q = delta_0 has no lattice point left of 0);
    the mirror form makes sup_x Delta*(x) equal plan_spread exactly (ERRATA 6).
    """
    points, f, g = _on_union(p, q)
    out: dict[float, float] = {}
    for k, x in enumerate(points.tolist()):
        if abs(f[k] - g[k]) <= MASS_TOL:
            out[x] = 0.0
            continue
        lead, lag = (f, g) if f[k] > g[k] else (g, f)
        ahead = np.flatnonzero(lag[k + 1 :] >= lead[k] - MASS_TOL)
        out[x] = float(points[k + 1 + ahead[0]] - x)
    return out
