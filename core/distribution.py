"""Finite discrete distributions on the real line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
from pydantic import ConfigDict, model_validator

from pufferfish_core import validation
from pufferfish_core.validation import FloatArray

# Sums of float support points closer than this (relative) are the same point.
MERGE_RTOL = 1e-12


class Distribution(validation.InputModel):
    """Law of one real random variable with finite support.

    Support is sorted and distinct; probabilities are >= 0 and sum to 1 (checked to 1e-9,
    then renormalised). Zero-probability points are kept: they fix the lattice some rules
    work on. Every construction path goes through the same validation.
    """

    model_config = ConfigDict(frozen=True)
    whole: ClassVar[str] = "distribution"

    support: tuple[float, ...]
    probs: tuple[float, ...]

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        validation.present(data, ("support", "probs"), "is required")
        xs, ps = validation.support_and_probs(data["support"], data["probs"])
        return {"support": tuple(xs.tolist()), "probs": tuple(ps.tolist())}

    def __eq__(self, other: object) -> bool:
        # Compare the fields only: the cached arrays in __dict__ must not take part.
        if not isinstance(other, Distribution):
            return NotImplemented
        return self.support == other.support and self.probs == other.probs

    def __hash__(self) -> int:
        return hash((self.support, self.probs))

    @cached_property
    def _cached(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """(support, probs, positive support, positive probs), read-only arrays."""
        xs = np.array(self.support, dtype=np.float64)
        ps = np.array(self.probs, dtype=np.float64)
        keep = ps > 0.0
        out = (xs, ps, xs[keep], ps[keep])
        for arr in out:
            arr.setflags(write=False)
        return out

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def from_points(cls, support: Sequence[float], probs: Sequence[float]) -> Distribution:
        """Points and their probabilities, in any order (duplicates are an error)."""
        return cls.model_validate({"support": support, "probs": probs})

    @classmethod
    def from_counts(cls, values: Sequence[float], counts: Sequence[float]) -> Distribution:
        """A histogram: distinct values and non-negative counts with a positive total."""
        xs, cs = validation.values_and_counts(values, counts)
        return cls(support=xs.tolist(), probs=(cs / cs.sum()).tolist())

    @classmethod
    def bernoulli(cls, p: float) -> Distribution:
        """Pr(1) = p, Pr(0) = 1 - p (both points kept even when p is 0 or 1)."""
        prob = validation.probability(p, "p")
        return cls(support=(0.0, 1.0), probs=(1.0 - prob, prob))

    @classmethod
    def point(cls, a: float) -> Distribution:
        """The point mass at a."""
        return cls(support=(validation.real(a, "a"),), probs=(1.0,))

    @property
    def _xs(self) -> FloatArray:
        return self._cached[0]

    @property
    def _ps(self) -> FloatArray:
        return self._cached[1]

    # -- queries ------------------------------------------------------------------------
    def arrays(self) -> tuple[FloatArray, FloatArray]:
        """(support, probs) as read-only float arrays (no copy)."""
        return self._cached[0], self._cached[1]

    def positive_support(self) -> tuple[float, ...]:
        """Support points that carry positive probability."""
        return tuple(self._cached[2].tolist())

    def positive_arrays(self) -> tuple[FloatArray, FloatArray]:
        """(support, probs) restricted to positive probability, read-only (no copy)."""
        return self._cached[2], self._cached[3]

    def prob(self, x: float) -> float:
        hit = np.flatnonzero(self._xs == x)
        return float(self._ps[hit[0]]) if hit.size else 0.0

    def cdf(self, x: float) -> float:
        """Pr(X <= x)."""
        k = int(np.searchsorted(self._xs, x, side="right"))
        return min(1.0, math.fsum(self._ps[:k].tolist()))

    def mean(self) -> float:
        return math.fsum((self._xs * self._ps).tolist())

    def is_bernoulli(self) -> bool:
        """All mass on {0, 1} (point masses at 0 or 1 included)."""
        return set(self.positive_support()) <= {0.0, 1.0}

    def bernoulli_p(self) -> float:
        """Pr(1) of a distribution on {0, 1}; refuses any other distribution."""
        validation.bernoulli(self.positive_support(), "distribution", "for this rule")
        return self.prob(1.0)

    # -- operations ---------------------------------------------------------------------
    def shift(self, a: float) -> Distribution:
        """Law of X + a."""
        return Distribution(support=(self._xs + validation.real(a, "a")).tolist(), probs=self.probs)

    def convolve(self, other: Distribution) -> Distribution:
        """Law of X + Y for independent X ~ self, Y ~ other (equal sums merged)."""
        ox, op = other.arrays()
        sums = (self._xs[:, None] + ox[None, :]).ravel()
        weights = (self._ps[:, None] * op[None, :]).ravel()
        order = np.argsort(sums, kind="stable")
        sums, weights = sums[order], weights[order]
        scale = np.maximum(np.abs(sums[1:]), np.abs(sums[:-1]))
        new_point = np.diff(sums) > MERGE_RTOL * np.maximum(scale, 1.0)
        starts = np.concatenate(([0], np.flatnonzero(new_point) + 1))
        merged_x = sums[starts]
        merged_p = np.add.reduceat(weights, starts)
        return Distribution(support=merged_x.tolist(), probs=merged_p.tolist())


def point_zero() -> Distribution:
    """delta_0, shared (absence of a user = reporting 0)."""
    return _DELTA_ZERO


_DELTA_ZERO = Distribution.point(0.0)
