"""The multi-user system of Section 3: X = f(D) = sum of the present users' values."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, field_validator

from pufferfish_core import validation
from pufferfish_core.distribution import Distribution, point_zero


class User(validation.InputModel):
    """A user present with probability ``zeta`` who reports D_i ~ ``dist`` when present."""

    model_config = ConfigDict(frozen=True)
    whole: ClassVar[str] = "system"

    zeta: float
    dist: Distribution

    @field_validator("zeta", mode="before")
    @classmethod
    def _zeta_in_unit_interval(cls, value: Any) -> float:
        return validation.probability(value, "zeta")


class MultiUserSystem(validation.InputModel):
    """Users 0..n-1. Priors of X given a secret about user i (eqs P_sa, P_sperp, P_sDi).

    Every prior carries the common factor prod_{j != i} zeta_j, which cancels once the prior
    is normalised, so the zetas never change a prior (nor any theta calibrated on it).
    """

    model_config = ConfigDict(frozen=True)
    whole: ClassVar[str] = "system"

    users: tuple[User, ...]

    @field_validator("users")
    @classmethod
    def _not_empty(cls, value: tuple[User, ...]) -> tuple[User, ...]:
        validation.non_empty(value, "users")
        return value

    def _index(self, i: int) -> int:
        return validation.index(i, len(self.users), "i")

    def rest_law(self, i: int) -> Distribution:
        """Law of f(D_{-i}): the sum of every other user, all present."""
        i = self._index(i)
        law = point_zero()
        for j, user in enumerate(self.users):
            if j != i:
                law = law.convolve(user.dist)
        return law

    def prior_value(self, i: int, a: float) -> Distribution:
        """P_{X|S}(. | s_{a_i}): user i present and reporting a (eq P_sa)."""
        return self.rest_law(i).shift(a)

    def prior_absent(self, i: int) -> Distribution:
        """P_{X|S}(. | s_{perp_i}): user i absent (eq P_sperp)."""
        return self.rest_law(i)

    def prior_distribution(self, i: int, p: Distribution) -> Distribution:
        """P_{X|S}(. | s_{P_i}): user i present with D_i ~ P (eq P_sDi)."""
        return self.rest_law(i).convolve(p)


