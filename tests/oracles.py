"""Independent oracles for the tests (numpy/scipy only, none of the product's maths)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import logsumexp


def grid_loss(a: dict[str, Any], b: dict[str, Any], theta: float) -> float:
    """sup over a dense grid of y of |log P(y|A)/P(y|B)| under Laplace(theta), for laws given
    as {"support", "probs"}; the grid holds every support point and beyond the supports the
    ratio is constant, so this is the exact sup."""
    ax, ap = np.array(a["support"], float), np.array(a["probs"], float)
    bx, bp = np.array(b["support"], float), np.array(b["probs"], float)
    lo, hi = min(ax.min(), bx.min()) - 1, max(ax.max(), bx.max()) + 1
    ys = np.union1d(np.arange(lo, hi, 1e-3), np.concatenate((ax, bx)))
    log_a = logsumexp(-np.abs(ys[:, None] - ax[None, :]) / theta, b=ap, axis=1)
    log_b = logsumexp(-np.abs(ys[:, None] - bx[None, :]) / theta, b=bp, axis=1)
    return float(np.max(np.abs(log_a - log_b)))


def discrete_laplace_pmf(theta: float, grid: float) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of one draw g*Z, Pr[Z = k] = (1 - q)/(1 + q) q^|k|,
    q = e^(-g/theta), truncated where q^|k| < 1e-18 (the mass left out is < 1e-17)."""
    q = np.exp(-grid / theta)
    k_max = int(np.ceil(18 * np.log(10) / -np.log(q)))
    ks = np.arange(-k_max, k_max + 1)
    return ks * grid, (1 - q) / (1 + q) * q ** np.abs(ks)


def release_noise_sd(theta: float, grid: float, draws: int) -> float:
    """sd of the sum of ``draws`` independent draws, by direct summation of the pmf."""
    values, probs = discrete_laplace_pmf(theta, grid)
    return float(np.sqrt(draws * np.sum(values**2 * probs)))
