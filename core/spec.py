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
for every population of other users (ERRATA, "A user-local exact calibration").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core import _validate
from core.auditor import audit
from core.distribution import Distribution, point_zero
from core.errors import PufferfishInputError

if TYPE_CHECKING:
    from core.calibrators import Calibration

DEFAULT_RULE = "exact"

# Fields each pair requires; "rest" is accepted only where a rule needs it.
PAIR_FIELDS: dict[str, tuple[str, ...]] = {
    "value_change": ("a", "b"),
    "value_presence": ("a",),
    "distribution_presence": ("P",),
    "distribution_change": ("P", "Q"),
    "priors": ("P", "Q"),
}

PAIR_RULES: dict[str, tuple[str, ...]] = {
    "value_change": ("bound", "kantorovich", "exact"),
    "value_presence": ("bound", "kantorovich", "exact"),
    "distribution_presence": ("bound", "relaxed", "kantorovich", "exact"),
    "distribution_change": ("bound", "binary", "relaxed", "kantorovich", "exact"),
    "priors": ("kantorovich", "exact"),
}

ALL_RULES = ("bound", "relaxed", "exact", "kantorovich", "binary")

RULES_NEEDING_REST = {("distribution_change", "relaxed")}


@dataclass(frozen=True)
class SecretSpec:
    """A validated spec: ``first``/``second`` are the two priors of the user's own pair."""

    pair: str
    rule: str
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
    rule = DEFAULT_RULE if spec.get("rule") is None else _choice(spec, "rule", ALL_RULES)
    if rule not in PAIR_RULES[pair]:
        raise PufferfishInputError(
            "rule", f"{rule!r} does not apply to {pair}; use one of {', '.join(PAIR_RULES[pair])}"
        )
    needs_rest = (pair, rule) in RULES_NEEDING_REST
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

    if pair in ("value_change", "value_presence"):
        a = _validate.real(spec["a"], "a")
        if pair == "value_presence":
            return SecretSpec(pair, rule, Distribution.point(a), point_zero(), a=a)
        b = _validate.real(spec["b"], "b")
        if a == b:
            raise PufferfishInputError("b", "must differ from a")
        return SecretSpec(pair, rule, Distribution.point(a), Distribution.point(b), a=a, b=b)
    p = _distribution(spec, "P")
    if pair == "distribution_presence":
        return SecretSpec(pair, rule, p, point_zero())
    q = _distribution(spec, "Q")
    if rule in ("binary", "relaxed"):
        for name, dist in (("P", p), ("Q", q)):
            if not dist.is_bernoulli():
                raise PufferfishInputError(
                    name, f"must be Bernoulli (all mass on 0 and 1) for the {rule} rule"
                )
    rest = _distribution(spec, "rest") if needs_rest else None
    return SecretSpec(pair, rule, p, q, rest=rest)


def _calibrator(parsed: SecretSpec) -> Callable[[float], Calibration]:
    # Imported here: calibrators pulls in scipy (~0.5 s), which a rejected spec never needs.
    from core import calibrators

    first, second = parsed.first, parsed.second
    pair, rule = parsed.pair, parsed.rule
    if rule == "exact":
        return lambda eps: calibrators.exact(first, second, eps)
    if rule == "kantorovich":
        return lambda eps: calibrators.kantorovich(first, second, eps)
    if pair in ("value_change", "value_presence"):
        assert parsed.a is not None
        a: float = parsed.a
        if pair == "value_presence":
            return lambda eps: calibrators.value_presence(a, eps)
        assert parsed.b is not None
        b: float = parsed.b
        return lambda eps: calibrators.value_change(a, b, eps)
    if pair == "distribution_presence":
        if rule == "bound":
            return lambda eps: calibrators.distribution_presence_bound(first, eps)
        if first.is_bernoulli():
            p = first.bernoulli_p()
            return lambda eps: calibrators.distribution_presence_bernoulli(p, eps)
        return lambda eps: calibrators.distribution_presence_relaxed(first, eps)
    if rule == "bound":
        return lambda eps: calibrators.distribution_change_thm4(first, second, eps)
    if rule == "binary":
        return lambda eps: calibrators.distribution_change_binary(first, second, eps)
    rest = parsed.rest
    assert rest is not None
    return lambda eps: calibrators.distribution_change_binary_relaxed(first, second, rest, eps)


def calibrate_spec(spec: object, epsilon: float) -> dict[str, Any]:
    """theta for the spec at epsilon, with the exact audited loss of that theta."""
    eps = _validate.epsilon(epsilon)
    parsed = parse_spec(spec)
    calibration = _calibrator(parsed)(eps)
    if not math.isfinite(calibration.theta):
        raise PufferfishInputError("theta", f"{parsed.pair}/{parsed.rule} gives no finite theta")
    result: dict[str, Any] = {
        "pair": parsed.pair,
        "rule": parsed.rule,
        "theorem": calibration.theorem,
        "epsilon": eps,
        "theta": calibration.theta,
    }
    own = audit(parsed.first, parsed.second, calibration.theta)
    result.update(loss=own.loss, forward=own.forward, reverse=own.reverse)
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
