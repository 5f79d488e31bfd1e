"""Parse a secret-pair spec (the CLI's JSON) and calibrate or audit it. Pure: no I/O.

Spec shape::

    {"pair": "value_change" | "value_presence" | "distribution_presence"
             | "distribution_change" | "priors",
     "rule": "bound" | "relaxed" | "exact" | "kantorovich" | "binary",   # default "exact"
     "a": num, "b": num,                      # value pairs
     "P": {"support": [...], "probs": [...]}, "Q": {...},   # user distributions / priors of X
     "rest": {...}}                           # law of f(D_{-i}), only for the relaxed binary rule

For "priors", P and Q are two priors of X itself. Every other key, a missing field, or a rule
that does not apply to the pair is a PufferfishInputError naming the field. The reported
``loss`` is the exact two-sided audit of theta on the user's own pair, which bounds the loss
for every population of other users (ERRATA, "A user-local exact calibration"). ``charge`` is
what the stream charges per release under composition for this pair and theta
(core.budget.composition_charge: max(epsilon, plan spread / theta); docs/privacy.md,
"Composition"): epsilon for value pairs and the pointwise rules, more for the exact and relaxed
rules on distribution pairs. It is null when that charge is infinite (theta = 0 with a spread
> 0: the stream refuses every release of such a pair).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import _validate, policy
from core.auditor import audit
from core.budget import composition_charge
from core.distribution import Distribution, point_zero
from core.errors import PufferfishInputError
from core.kantorovich import plan_spread
from core.policy import PairKind, Rule

DEFAULT_RULE = Rule.EXACT
PRIORS = "priors"  # two priors of X itself (not a user's pair): only the generic rules

# Fields each pair requires; "rest" is accepted only where a rule needs it.
PAIR_FIELDS: dict[str, tuple[str, ...]] = {
    PairKind.VALUE_CHANGE: ("a", "b"),
    PairKind.VALUE_PRESENCE: ("a",),
    PairKind.DISTRIBUTION_PRESENCE: ("P",),
    PairKind.DISTRIBUTION_CHANGE: ("P", "Q"),
    PRIORS: ("P", "Q"),
}

RULES_NEEDING_REST = {(PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED)}
BERNOULLI_RULES = {(PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED),
                   (PairKind.DISTRIBUTION_CHANGE, Rule.BINARY)}


def _kind(pair: str) -> PairKind | None:
    return None if pair == PRIORS else PairKind(pair)


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


def _distribution(spec: Mapping[str, Any], field: str) -> Distribution:
    raw = spec[field]
    if not isinstance(raw, Mapping):
        raise PufferfishInputError(field, "must be an object {support, probs}")
    extra = sorted(set(raw) - {"support", "probs"})
    if extra:
        raise PufferfishInputError(f"{field}.{extra[0]}", "is not a known field")
    for key in ("support", "probs"):
        if key not in raw:
            raise PufferfishInputError(f"{field}.{key}", "is missing")
    try:
        return Distribution.from_points(raw["support"], raw["probs"])
    except PufferfishInputError as exc:
        raise PufferfishInputError(f"{field}.{exc.field}", exc.message) from None


def _choice(spec: Mapping[str, Any], field: str, allowed: tuple[str, ...]) -> str:
    value = spec[field]
    if not isinstance(value, str) or value not in allowed:
        raise PufferfishInputError(field, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value


def parse_spec(spec: object) -> SecretSpec:
    """Validate a spec dict (see the module docstring)."""
    if not isinstance(spec, Mapping):
        raise PufferfishInputError("spec", "must be a JSON object")
    if "pair" not in spec:
        raise PufferfishInputError("pair", "is missing")
    pair = _choice(spec, "pair", tuple(PAIR_FIELDS))
    kind = _kind(pair)
    rule = DEFAULT_RULE if spec.get("rule") is None else policy.rule(spec["rule"])
    allowed = policy.rules_for(kind)
    if rule not in allowed:
        raise PufferfishInputError(
            "rule", f"{rule.value!r} does not apply to {pair}; use one of "
            f"{', '.join(r.value for r in allowed)}"
        )
    needs_rest = (kind, rule) in RULES_NEEDING_REST
    known = {"pair", "rule", *PAIR_FIELDS[pair], *(("rest",) if needs_rest else ())}
    extra = sorted(set(spec) - known)
    if extra:
        reason = (
            f"is only used by the relaxed rule of distribution_change, not {pair}/{rule}"
            if extra[0] == "rest"
            else f"is not a field of a {pair} spec"
        )
        raise PufferfishInputError(extra[0], reason)
    for field in (*PAIR_FIELDS[pair], *(("rest",) if needs_rest else ())):
        if field not in spec:
            raise PufferfishInputError(field, f"is required for {pair}/{rule}")

    if kind in (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE):
        a = _validate.real(spec["a"], "a")
        if kind is PairKind.VALUE_PRESENCE:
            return SecretSpec(pair, rule, Distribution.point(a), point_zero(), a=a)
        b = _validate.real(spec["b"], "b")
        if a == b:
            raise PufferfishInputError("b", "must differ from a")
        return SecretSpec(pair, rule, Distribution.point(a), Distribution.point(b), a=a, b=b)
    p = _distribution(spec, "P")
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return SecretSpec(pair, rule, p, point_zero())
    q = _distribution(spec, "Q")
    if (kind, rule) in BERNOULLI_RULES:
        for name, dist in (("P", p), ("Q", q)):
            if not dist.is_bernoulli():
                raise PufferfishInputError(
                    name, f"must be Bernoulli (all mass on 0 and 1) for the {rule} rule"
                )
    rest = _distribution(spec, "rest") if needs_rest else None
    return SecretSpec(pair, rule, p, q, rest=rest)


def calibrate_spec(spec: object, epsilon: float) -> dict[str, Any]:
    """theta for the spec at epsilon, with the exact audited loss of that theta (one release)
    and the per-release charge under composition (module docstring)."""
    eps = _validate.epsilon(epsilon)
    parsed = parse_spec(spec)
    calibration = policy.calibrate(
        _kind(parsed.pair), parsed.rule, parsed.first, parsed.second, eps, parsed.rest
    )
    if not math.isfinite(calibration.theta):
        raise PufferfishInputError("theta", f"{parsed.pair}/{parsed.rule} gives no finite theta")
    result: dict[str, Any] = {
        "pair": parsed.pair,
        "rule": parsed.rule.value,
        "theorem": calibration.theorem,
        "epsilon": eps,
        "theta": calibration.theta,
    }
    own = audit(parsed.first, parsed.second, calibration.theta)
    result.update(loss=own.loss, forward=own.forward, reverse=own.reverse)
    charge = composition_charge(
        plan_spread(parsed.first, parsed.second), calibration.theta, eps
    )
    result["charge"] = charge if math.isfinite(charge) else None
    if parsed.rest is not None:
        priors = audit(
            parsed.first.convolve(parsed.rest), parsed.second.convolve(parsed.rest),
            calibration.theta,
        )
        result["loss_priors"] = priors.loss
    return result


def audit_spec(spec: object, theta: float) -> dict[str, float]:
    """Exact two-sided loss of theta on the spec's own pair (rule is validated, then unused)."""
    th = _validate.theta(theta)
    parsed = parse_spec(spec)
    result = audit(parsed.first, parsed.second, th)
    return {"loss": result.loss, "forward": result.forward, "reverse": result.reverse}
