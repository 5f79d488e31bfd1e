"""The demo's history of a run, which its lines and its plot are drawn from: each release as
the demo saw it (``Point``, with its groups' parts under release_by_group) and each learning
round's record (``Round``)."""

from __future__ import annotations

import math
from dataclasses import dataclass


def laplace_sd(theta: float) -> float:
    return theta * math.sqrt(2.0)


@dataclass
class GroupPoint:
    """One group's part of a release (release_by_group): published noisy sum and sd."""

    noisy: float
    sd: float
    exact: float | None = None


@dataclass
class Point:
    """One release as the demo saw it (``exact`` None until the truth tap told it)."""

    seq: int
    ts: float
    noisy: float
    theta: float
    spent: float
    priors_seq: int
    exact: float | None = None
    draws: int = 1  # Laplace draws of scale theta in the release: its tree nodes, else 1
    mechanism: str = "independent"
    # release_by_group: the groups' parts, and the total's published noise_sd (its noise is
    # the groups' draws, not one of scale theta)
    groups: dict[str, GroupPoint] | None = None
    published_sd: float | None = None

    @property
    def sd(self) -> float:
        if self.published_sd is not None:
            return self.published_sd
        return laplace_sd(self.theta) * math.sqrt(self.draws)


@dataclass
class Round:
    seq: int
    ts: float
    group: str
    status: str
    radius: float
    spent: float
