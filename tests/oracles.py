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
