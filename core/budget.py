"""Privacy budget accounting across releases (basic sequential composition).

Why composition holds for this mechanism. Take two secrets that differ only in user i. The
output law of T releases is, for both secrets, a mixture over the path of the other users
(f(D_{-i}) at every release) with the *same* weights; a ratio of two mixtures with equal
weights is at most the largest ratio of their components, so the T-release loss is at most
the loss of user i's own contribution sequence (x_1..x_T) against (x'_1..x'_T). Couple the two
sequences pointwise with the monotone (north-west corner) plan of Proposition 1: under that
coupling |x_t - x'_t| <= spread, and each release's Laplace density ratio is at most
e^{|x_t - x'_t| / theta_t}. A product of pointwise bounds is a pointwise bound, and a mixture
of pointwise-bounded ratios is bounded by the same constant, so the T releases cost at most
sum_t spread / theta_t.

Hence the per-release CHARGE is ``spread / theta`` (at least epsilon). It equals epsilon for
value pairs and for the pointwise rules (Thm 1, Thm 2, Thm 3 max|t|/eps, Thm 4, Kantorovich,
binary 1/eps). It exceeds epsilon for the exact and relaxed rules on distribution pairs: those
bound an *average*, and with a value that persists across releases
E[e^{T|D|/theta}] > (E[e^{|D|/theta}])^T (Jensen), so T * epsilon would under-count.

Limits: users are independent; the secret's sequence model is a persistent value or i.i.d.
reports from the stated distribution; learned priors enter only through DP learning rounds,
each charged its epsilon_learn on the same accountant (docs/privacy.md, "Composition"); only
basic composition (no advanced / Renyi accounting).

Bookkeeping is exact: every float charge is recorded as the Fraction of its shortest decimal
repr (``0.1`` -> 1/10; the float and that decimal differ by under half an ulp, far below the
rounding already in theta), so ten charges of 0.1 fill a total of 1.0 exactly, with no drift.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from pufferfish_core import validation
from pufferfish_core.errors import PufferfishError


class BudgetExhausted(PufferfishError):
    """A release was refused: it would push the spent budget past the total."""

    def __init__(self, requested: float, remaining: float) -> None:
        super().__init__(f"budget exhausted: requested {requested}, remaining {remaining}")
        self.requested = requested
        self.remaining = remaining


def exact_decimal(value: float) -> Fraction:
    """The Fraction of the shortest decimal repr of ``value`` (0.1 -> 1/10; module docstring)."""
    return Fraction(repr(float(value)))


def _fraction_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def composition_charge(spread: float, theta: float, epsilon: float) -> float:
    """Budget charge of one release: max(epsilon, spread / theta); inf means refuse."""
    spread = validation.nonnegative(spread, "spread")
    epsilon = validation.positive(epsilon, "epsilon")
    theta = validation.nonnegative_number(theta, "theta")
    if theta == 0:
        return epsilon if spread == 0 else math.inf
    return max(epsilon, spread / theta)


class Accountant:
    """Sequential-composition accountant: refuses any charge that would exceed ``total``."""

    def __init__(self, total: float) -> None:
        self.total = validation.nonnegative(total, "total")
        self._total = exact_decimal(self.total)
        self._spent = Fraction(0)
        self.charges: list[float] = []

    @property
    def spent(self) -> float:
        return float(self._spent)

    @property
    def releases(self) -> int:
        return len(self.charges)

    @property
    def remaining(self) -> float:
        return float(self._total - self._spent)

    def _checked_charge(self, eps: float) -> Fraction | None:
        """The exact charge, or None when it is infinite (always refused)."""
        eps = validation.positive_number(eps, "eps")
        return None if math.isinf(eps) else exact_decimal(eps)

    def can_spend(self, eps: float) -> bool:
        charge = self._checked_charge(eps)
        return charge is not None and self._spent + charge <= self._total

    def spend(self, eps: float) -> None:
        """Record one release costing ``eps``; if over, raise BudgetExhausted, record nothing."""
        charge = self._checked_charge(eps)
        if charge is None or self._spent + charge > self._total:
            raise BudgetExhausted(requested=float(eps), remaining=self.remaining)
        self._spent += charge
        self.charges.append(float(eps))

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "total_exact": _fraction_text(self._total),
            "spent": self.spent,
            "spent_exact": _fraction_text(self._spent),
            "remaining": self.remaining,
            "releases": self.releases,
            "charges": list(self.charges),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Accountant:
        """Rebuild from ``to_dict`` output; every inconsistency is a PufferfishInputError
        (core.validation.budget_record)."""
        total, charges, spent = validation.budget_record(data, exact_decimal)
        accountant = cls(total)
        accountant._spent = spent
        accountant.charges = charges
        return accountant
