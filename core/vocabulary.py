"""The paper's vocabulary: secret pair kinds, rules, which rules apply to which pair, and the
values a calibration produces. A leaf: it imports nothing from core but the error type, so
the settings, the spec parser and the stream name pairs and rules without loading the maths.

Which rules apply to a pair kind is stated here (``rules_for``); which theorem gives each
(pair, rule) is core/policy.py ``TABLE``, whose keys are exactly these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from pufferfish_core.errors import PufferfishInputError


class PairKind(StrEnum):
    """The secret pairs of the paper (Section 3)."""

    VALUE_CHANGE = "value_change"  # S_{a,b}
    VALUE_PRESENCE = "value_presence"  # S_{a,perp}
    DISTRIBUTION_PRESENCE = "distribution_presence"  # S_{P,perp}
    DISTRIBUTION_CHANGE = "distribution_change"  # S_{P,Q}


class Rule(StrEnum):
    """How theta is derived from a pair of priors."""

    EXACT = "exact"  # smallest theta passing the exact two-sided audit (docs/errata.md)
    KANTOROVICH = "kantorovich"  # Proposition 1: W_inf spread / eps
    BOUND = "bound"  # Theorems 1-4 as stated
    RELAXED = "relaxed"  # Theorem 3 relaxed; corrected relaxed binary Lemma
    BINARY = "binary"  # Lemma SuffCondSPQBinary (two Bernoulli laws): 1 / eps


# Rules a deployment may configure (binary only applies to two Bernoulli laws).
STREAM_RULES = (Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND, Rule.RELAXED)
# Rules that apply to any two priors of X, whatever the pair.
GENERIC_RULES = (Rule.KANTOROVICH, Rule.EXACT)

# Rules that apply to each pair kind, in Rule order: the generic rules, the theorem of the
# pair (bound, relaxed) and, for two distributions, the binary Lemma.
_PAIR_RULES: dict[PairKind, tuple[Rule, ...]] = {
    PairKind.VALUE_CHANGE: (Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND, Rule.RELAXED),
    PairKind.VALUE_PRESENCE: (Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND, Rule.RELAXED),
    PairKind.DISTRIBUTION_PRESENCE: (Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND, Rule.RELAXED),
    PairKind.DISTRIBUTION_CHANGE: tuple(Rule),
}

PRIORS = "priors"  # the pair of a calibration on two priors of X (no pair kind)


def rules_for(kind: PairKind | None) -> tuple[Rule, ...]:
    """The rules that apply to a pair kind (None: two priors of X, only the generic rules)."""
    return GENERIC_RULES if kind is None else _PAIR_RULES[kind]


def pair_kind(value: object, field: str = "pair") -> PairKind:
    try:
        return PairKind(str(value))
    except ValueError:
        names = ", ".join(k.value for k in PairKind)
        raise PufferfishInputError(field, f"must be one of {names}; got {value!r}") from None


def rule(value: object, field: str = "rule", allowed: tuple[Rule, ...] = tuple(Rule)) -> Rule:
    try:
        out = Rule(str(value))
    except ValueError:
        out = None
    if out is None or out not in allowed:
        names = ", ".join(r.value for r in allowed)
        raise PufferfishInputError(field, f"must be one of {names}; got {value!r}")
    return out


def applicable(kind: PairKind | None, how: Rule) -> Rule:
    """``how`` when it applies to ``kind`` (``rules_for``), else the error naming the rules
    that do."""
    allowed = rules_for(kind)
    if how not in allowed:
        names = ", ".join(r.value for r in allowed)
        raise PufferfishInputError(
            "rule", f"{how.value!r} does not apply to {kind or PRIORS}; use one of {names}"
        )
    return how


class Derivation(NamedTuple):
    """What a calibrator gives: theta and the theorem (or audit) it comes from."""

    theta: float
    theorem: str


@dataclass(frozen=True, slots=True)
class Calibration:
    """A noise scale and where it came from (``pair`` names the secret pair kind, or
    ``priors``), built once by core.policy.calibrate."""

    theta: float
    epsilon: float
    rule: str
    pair: str
    theorem: str
