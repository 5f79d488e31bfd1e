"""Group laws learned under user-level differential privacy (docs/privacy.md, "Learned priors").

Each present user contributes their *normalised* histogram over the domain: a vector of mass
exactly 1, held in integer units of 2**-SHARE_LOG2 (largest-remainder rounding, so the sum is
exact). A group's statistic is the sum of its members' vectors. Over the concatenation of
every configured group's vector, one user joining or leaving changes the L1 norm by 1, and a
change of the user's reports or group by at most 2: L1 sensitivity 2. Adding discrete Laplace
noise of scale 2/epsilon_learn (CKS20, core.noise) to every bin of every configured group —
whether or not anyone is in it — is therefore epsilon_learn-DP at the user level. Clipping,
the floor, normalisation and the keep-the-previous-law rule are post-processing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from pufferfish_core import validation
from pufferfish_core.distribution import Distribution
from pufferfish_core.noise import sample_discrete_laplace

SHARE_LOG2 = 16
SHARE_UNITS = 2**SHARE_LOG2  # one user's whole mass
SENSITIVITY = 2  # L1, in users (see the module docstring)


def user_share(counts: Sequence[int]) -> tuple[int, ...]:
    """A user's normalised histogram in units of 2**-SHARE_LOG2, summing to SHARE_UNITS.

    All zeros when the user has no report yet (such a user contributes nothing).
    """
    total = sum(counts)
    if total <= 0:
        return tuple(0 for _ in counts)
    floors = [c * SHARE_UNITS // total for c in counts]
    left = SHARE_UNITS - sum(floors)
    if left:
        remainders = [c * SHARE_UNITS % total for c in counts]
        # the largest remainders first, equal ones in index order: a stable sort keeps equal
        # keys in place with reverse=True too, and a C-level key is fast (one call per user
        # and batch on the stream's input path)
        for j in sorted(range(len(remainders)), key=remainders.__getitem__, reverse=True)[:left]:
            floors[j] += 1
    return tuple(floors)


# counts this large would overflow int64 in ``user_shares`` (c * SHARE_UNITS, row totals)
SHARES_COUNT_LIMIT = 2**62 // SHARE_UNITS // 2


def user_shares(counts: np.ndarray) -> np.ndarray:
    """``user_share`` of every row of an (n, K) int64 array of histograms, each with at least
    one report, as an (n, K) int64 array: the same floors and the same largest-remainder
    rounding, equal remainders in index order (a stable sort of the negated remainders).
    Rows whose entries or total reach ``SHARES_COUNT_LIMIT`` are refused (PufferfishInputError,
    a ValueError): the caller uses ``user_share`` for those."""
    c, totals = validation.histogram_rows(counts, SHARES_COUNT_LIMIT)
    n, k = c.shape
    if n == 0:
        return c.copy()
    scaled = c * SHARE_UNITS
    floors, rems = np.divmod(scaled, totals[:, None])
    left = SHARE_UNITS - floors.sum(axis=1)
    order = np.argsort(-rems, axis=1, kind="stable")  # by remainder, ties in index order
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(k), (n, k)), axis=1)
    shares: np.ndarray = floors + (rank < left[:, None])
    return shares


@dataclass(frozen=True)
class LearnedLaw:
    """One group's estimate after a round; ``kept`` when the previous law was kept."""

    law: Distribution
    kept: bool
    noisy_mass: float


@dataclass(frozen=True)
class HistogramLearner:
    """The learning mechanism and its privacy map (charge = epsilon_learn per round)."""

    domain: tuple[float, ...]
    epsilon_learn: float
    floor: float  # alpha: weight of the uniform law mixed in
    min_mass: float  # a group whose noisy mass (in users) is below this keeps its law

    def __post_init__(self) -> None:
        validation.epsilon(self.epsilon_learn, "epsilon_learn")
        validation.probability(self.floor, "prior_floor")
        validation.real(self.min_mass, "learn_min_mass")

    def charge(self) -> float:
        return self.epsilon_learn

    @property
    def scale_units(self) -> Fraction:
        """Noise scale in share units: (SENSITIVITY / epsilon_learn) * SHARE_UNITS."""
        scale: Fraction = Fraction(SENSITIVITY) / Fraction(self.epsilon_learn) * SHARE_UNITS
        return scale

    def draw(
        self,
        sums: Mapping[str, Sequence[int]],
        previous: Mapping[str, Distribution],
    ) -> dict[str, LearnedLaw]:
        """A noisy law for every group in ``previous`` (the configured groups)."""
        k = len(self.domain)
        out: dict[str, LearnedLaw] = {}
        for group in sorted(previous):
            exact = list(sums.get(group, ())) or [0] * k
            noisy = [x + sample_discrete_laplace(self.scale_units) for x in exact]
            out[group] = self._estimate(noisy, previous[group])
        return out

    def _estimate(self, noisy_units: Sequence[int], previous: Distribution) -> LearnedLaw:
        mass = Fraction(sum(noisy_units), SHARE_UNITS)
        clipped = [max(u, 0) for u in noisy_units]
        if mass < Fraction(self.min_mass) or mass <= 0 or sum(clipped) == 0:
            return LearnedLaw(previous, True, float(mass))
        total = sum(clipped)
        alpha = Fraction(self.floor)
        k = len(self.domain)
        probs = [(1 - alpha) * Fraction(c, total) + alpha / k for c in clipped]
        law = Distribution.from_points(list(self.domain), [float(p) for p in probs])
        return LearnedLaw(law, False, float(mass))


def uniform(domain: Sequence[float]) -> Distribution:
    """The starting law of a learned group without a declared one."""
    return Distribution.from_points(list(domain), [1.0 / len(domain)] * len(domain))
