"""Parse a secret-pair spec (the CLI's JSON) and audit a theta on it. Pure: no I/O.

Spec shape: SPEC_FORMAT below (also what ``pufferfish calibrate --help`` and ``audit --help``
show). For "priors", P and Q are two priors of X itself. Every other key, a missing field, or a rule
that does not apply to the pair is a PufferfishInputError naming the field. The reported
``loss`` is the exact two-sided audit of theta on the user's own pair, which bounds the loss
for every population of other users (ERRATA, "A user-local exact calibration"). Parsing needs
the vocabulary only, not the calibrators, so parsing and auditing a spec load no scipy
(``pufferfish audit``); calibrating a spec is core/spec_calibration.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pufferfish_core import validation
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.vocabulary import PRIORS, PairKind, Rule, applicable, rule

DEFAULT_RULE = Rule.EXACT

SPEC_FORMAT = """\
SPEC: one JSON object, from a file or - (stdin): the secret pair of one user
and, optionally, the rule theta is derived by.

  "pair"  the fields it needs
  value_change           "a", "b": two values the user may hold (a != b)
  value_presence         "a": the user's value, against the user's absence
  distribution_presence  "P": the user's law, against the user's absence
  distribution_change    "P", "Q": two laws the user's value may follow
                         ("rest", the law of the others' sum: relaxed rule only)
  priors                 "P", "Q": two priors of the data itself
  A law is {"support": [values], "probs": [probabilities summing to 1]}.
  "rule": exact (the default), kantorovich, bound, relaxed, or binary (two
  Bernoulli laws of distribution_change); a rule that does not apply to the
  pair is an error naming those that do.
"""

# Fields each pair requires; "rest" is accepted only where a rule needs it.
PAIR_FIELDS: dict[str, tuple[str, ...]] = {
    PairKind.VALUE_CHANGE: ("a", "b"),
    PairKind.VALUE_PRESENCE: ("a",),
    PairKind.DISTRIBUTION_PRESENCE: ("P",),
    PairKind.DISTRIBUTION_CHANGE: ("P", "Q"),
    PRIORS: ("P", "Q"),
}

LAW_FIELDS = ("P", "Q", "rest")  # the fields holding a law {"support": [...], "probs": [...]}
LAW_KEYS = ("support", "probs")
RULES_NEEDING_REST = {(PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED)}
BERNOULLI_RULES = {(PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED),
                   (PairKind.DISTRIBUTION_CHANGE, Rule.BINARY)}


@dataclass(frozen=True)
class SecretSpec:
    """A validated spec: ``first``/``second`` are the two priors of the user's own pair."""

    pair: str
    rule: Rule
    first: Distribution
    second: Distribution
    a: float | None = None
    b: float | None = None
    rest: Distribution | None = None

    @property
    def kind(self) -> PairKind | None:
        """The pair kind (None for two priors of X)."""
        return None if self.pair == PRIORS else PairKind(self.pair)


def _distribution(spec: Mapping[str, Any], field: str) -> Distribution:
    raw = validation.mapping(spec[field], field, "must be an object {support, probs}")
    validation.known(raw, ("support", "probs"), "is not a known field", f"{field}.")
    validation.present(raw, LAW_KEYS, "is missing", f"{field}.")
    try:
        return Distribution.from_points(raw["support"], raw["probs"])
    except PufferfishInputError as exc:
        raise validation.within(field, exc) from None


def parse_spec(spec: object) -> SecretSpec:
    """Validate a spec dict (see the module docstring)."""
    spec = validation.mapping(spec, "spec", "must be a JSON object")
    validation.present(spec, ("pair",), "is missing")
    pair = validation.choice(spec["pair"], "pair", tuple(PAIR_FIELDS))
    kind = None if pair == PRIORS else PairKind(pair)
    how = applicable(kind, DEFAULT_RULE if spec.get("rule") is None else rule(spec["rule"]))
    needs_rest = (kind, how) in RULES_NEEDING_REST
    fields = (*PAIR_FIELDS[pair], *(("rest",) if needs_rest else ()))
    validation.known(
        spec, {"pair", "rule", *fields}, f"is not a field of a {pair} spec",
        why={"rest": f"is only used by the relaxed rule of distribution_change, not {pair}/{how}"},
    )
    validation.present(spec, fields, f"is required for {pair}/{how}")
    laws = {f: spec[f] for f in fields if f in LAW_FIELDS}
    validation.present_in_each(laws, LAW_KEYS, "is missing")  # all of them named at once

    if kind in (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE):
        a = validation.real(spec["a"], "a")
        if kind is PairKind.VALUE_PRESENCE:
            return SecretSpec(pair, how, Distribution.point(a), point_zero(), a=a)
        b = validation.real(spec["b"], "b")
        validation.distinct(b, a, "b", "must differ from a")
        return SecretSpec(pair, how, Distribution.point(a), Distribution.point(b), a=a, b=b)
    p = _distribution(spec, "P")
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return SecretSpec(pair, how, p, point_zero())
    q = _distribution(spec, "Q")
    if (kind, how) in BERNOULLI_RULES:
        for name, dist in (("P", p), ("Q", q)):
            validation.bernoulli(dist.positive_support(), name, f"for the {how} rule")
    rest = _distribution(spec, "rest") if needs_rest else None
    return SecretSpec(pair, how, p, q, rest=rest)


def audit_spec(spec: object, theta: float) -> dict[str, float]:
    """Exact two-sided loss of theta on the spec's own pair (rule is validated, then unused)."""
    th = validation.theta(theta)
    parsed = parse_spec(spec)
    result = audit(parsed.first, parsed.second, th)
    return {"loss": result.loss, "forward": result.forward, "reverse": result.reverse}
