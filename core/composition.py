"""Exact privacy loss of T Laplace releases of ONE persistent value.

A user's contribution x is drawn once, x ~ A under one secret and x ~ B under the other, and
release t publishes y_t = x + Laplace(theta_t) with fresh noise. The loss is

    sup_{y in R^T} | log  sum_x A(x) prod_t L_t(y_t - x)  /  sum_x B(x) prod_t L_t(y_t - x) |.

Theorem: it equals the ONE-release exact loss (core/auditor.py) at the scale
theta* = 1 / sum_t (1 / theta_t), i.e. theta / T for a constant theta, and the sup is attained
with every output at the same support point (docs/privacy.md, "An exact T-fold accountant?").

Proof. Fix y and let c = 1/theta*. As a function of z, f(z) = prod_t e^{-|y_t - z|/theta_t} =
e^{-phi(z)} with phi convex, piecewise linear, slope s(z) = sum_t sign(z - y_t)/theta_t, so
|s| <= c, and phi's slope jumps by 2/theta_t at each y_t. The Laplace kernel k(u) = e^{-c|u|}
solves (c^2 - d^2/dz^2) k = 2c delta, so f = k * mu with

    mu = [(c^2 - s^2) f  dz  +  sum_t (2/theta_t) f(y_t) delta_{y_t}] / (2c)  >=  0,

a finite measure on [min y, max y] (s = +-c outside it, so the density vanishes there; f and
k * mu are bounded, so they are equal: their difference solves (c^2 - D^2) g = 0 and is
bounded). Hence, for both priors with the SAME weights mu,

    sum_x A(x) f(x) = int mu(dy') (A * k)(y'),      sum_x B(x) f(x) = int mu(dy') (B * k)(y'),

and a ratio of two mixtures with equal non-negative weights is at most the largest ratio of
their components: the T-release ratio at y is at most sup_{y'} (A * k)(y') / (B * k)(y'), the
one-release ratio at scale theta*, in both directions. The diagonal y = (y', ..., y') gives
f(z) = k(y' - z) exactly, so the bound is attained: equality.

Consequences. The persistent-value loss of T releases at a constant theta is
audit(A, B, theta / T) — no search over output vectors. (A direct exact search over the
multisets of support points, Dinkelbach + dynamic programme, agreed with this to 1e-12 on
thousands of random laws; tests/core/test_composition.py checks the theorem against a dense
grid of outputs in R^T and an enumeration of all output multisets.) For i.i.d. values the
T-release law is a product, so the loss is exactly T times the one-release loss. Neither is
the loss of a value that changes in any other way; the stream keeps the pointwise charge
(docs/privacy.md explains why, with a counterexample).

theta = 0 (no noise): every release equals x, so T releases say what one does: the noiseless
loss of one release (max |log A(x)/B(x)|, inf when the supports differ), for every T.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pufferfish_core import validation
from pufferfish_core.auditor import AuditResult, audit
from pufferfish_core.distribution import Distribution


def combined_scale(thetas: Sequence[float]) -> float:
    """theta* = 1 / sum_t 1/theta_t: the one-release scale equivalent to releases of one x at
    scales theta_t (0 when any theta_t is 0: that release shows x itself)."""
    scales = validation.thetas(thetas)
    if any(th == 0.0 for th in scales):
        return 0.0
    return 1.0 / math.fsum(1.0 / th for th in scales)


def persistent_audit(a: Distribution, b: Distribution, thetas: Sequence[float]) -> AuditResult:
    """Exact two-sided loss (loss, forward, reverse) of releases of one persistent x at the
    non-adaptive scales ``thetas``, x ~ a vs x ~ b (module docstring)."""
    return audit(a, b, combined_scale(thetas))


def tfold_loss(a: Distribution, b: Distribution, theta: float, releases: int) -> float:
    """sup_y |log P(y | x ~ a) / P(y | x ~ b)| for T = ``releases`` Laplace(theta) releases of
    one persistent x: the one-release exact loss at theta / T."""
    th = validation.theta(theta)
    t = validation.releases(releases)
    return audit(a, b, th / t).loss
