"""core/spec.py and core/spec_calibration.py: parsing, rule mapping and the audited loss of
every emitted theta.

Expected thetas are by hand from the theorems; losses are checked against a dense grid of
outputs written here (not core.auditor).
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.spec import audit_spec, parse_spec
from pufferfish_core.spec_calibration import calibrate_spec
from tests.oracles import grid_loss

EPS = 0.5


def bern(p: float) -> dict[str, list[float]]:
    return {"support": [0, 1], "probs": [1 - p, p]}


DELTA0 = {"support": [0.0], "probs": [1.0]}


def test_default_rule_is_exact_and_value_change_matches_theorem_1() -> None:
    result = calibrate_spec({"pair": "value_change", "a": 5, "b": 3}, EPS)
    assert result["rule"] == "exact"
    assert result["theta"] == pytest.approx(4.0, rel=1e-6)  # |5 - 3| / 0.5
    assert result["loss"] <= EPS


@pytest.mark.parametrize(
    ("spec", "theorem"),
    [
        ({"pair": "value_change", "rule": "bound", "a": 1, "b": 2}, "Theorem 1"),
        ({"pair": "value_presence", "rule": "bound", "a": 1}, "Theorem 2"),
        ({"pair": "distribution_presence", "rule": "bound", "P": bern(0.3)}, "Theorem 3"),
        ({"pair": "distribution_presence", "rule": "relaxed", "P": bern(0.3)}, "Bernoulli"),
        ({"pair": "distribution_presence", "rule": "relaxed",
          "P": {"support": [0, 2], "probs": [0.5, 0.5]}}, "relaxed"),
        ({"pair": "distribution_change", "rule": "bound", "P": bern(0.3), "Q": bern(0.6)},
         "Theorem 4"),
        ({"pair": "distribution_change", "rule": "binary", "P": bern(0.3), "Q": bern(0.6)},
         "SuffCondSPQBinary"),
        ({"pair": "priors", "rule": "kantorovich", "P": bern(0.3), "Q": bern(0.6)},
         "Proposition 1"),
    ],
)
def test_rule_maps_to_the_right_theorem(spec: dict[str, Any], theorem: str) -> None:
    assert theorem in calibrate_spec(spec, EPS)["theorem"]


def test_bernoulli_relaxed_presence_uses_the_closed_form() -> None:
    theta = calibrate_spec(
        {"pair": "distribution_presence", "rule": "relaxed", "P": bern(0.3)}, EPS
    )["theta"]
    assert theta == pytest.approx(1 / math.log((math.exp(EPS) - 0.7) / 0.3), rel=1e-12)


def test_relaxed_binary_reports_both_losses() -> None:
    spec = {"pair": "distribution_change", "rule": "relaxed", "P": bern(0.2), "Q": bern(0.9),
            "rest": {"support": [0, 1], "probs": [0.5, 0.5]}}
    result = calibrate_spec(spec, EPS)
    e = math.exp(EPS)
    assert result["theta"] == pytest.approx(1 / math.log(e + (e - 1) * 0.2 / 0.7), rel=1e-12)
    # priors of X with rest Bernoulli(1/2): P*R = (0.4, 0.5, 0.1), Q*R = (0.05, 0.5, 0.45)
    prior_p = {"support": [0, 1, 2], "probs": [0.4, 0.5, 0.1]}
    prior_q = {"support": [0, 1, 2], "probs": [0.05, 0.5, 0.45]}
    assert result["loss_priors"] == pytest.approx(
        grid_loss(prior_p, prior_q, result["theta"]), abs=1e-9
    )
    assert result["loss"] == pytest.approx(
        grid_loss(bern(0.2), bern(0.9), result["theta"]), abs=1e-9
    )
    assert max(result["loss"], result["loss_priors"]) <= EPS + 1e-12


@pytest.mark.parametrize(
    ("spec", "charge"),
    [
        # value pairs: theta = |a - b| / eps, spread |a - b| -> the charge is eps
        ({"pair": "value_change", "a": 5, "b": 3}, EPS),
        ({"pair": "value_presence", "a": -4}, EPS),
        # Kantorovich: theta = spread / eps -> eps
        ({"pair": "distribution_presence", "rule": "kantorovich", "P": bern(0.3)}, EPS),
        # exact on (Bernoulli(0.3), delta_0): theta = 1 / log((e^eps - 0.7) / 0.3), spread 1
        ({"pair": "distribution_presence", "P": bern(0.3)},
         math.log((math.exp(EPS) - 0.7) / 0.3)),
        # no noise needed (|log 0.5/0.55| <= eps) but the plan moves mass by 1: refused (null)
        ({"pair": "distribution_change", "P": bern(0.5), "Q": bern(0.55)}, None),
    ],
)
def test_charge_under_composition(spec: dict[str, Any], charge: float | None) -> None:
    result = calibrate_spec(spec, EPS)
    if charge is None:
        assert result["theta"] == 0.0 and result["charge"] is None
    else:
        assert result["charge"] == pytest.approx(charge, rel=1e-6)
        assert result["charge"] >= EPS


def test_audit_spec_value_presence() -> None:
    out = audit_spec({"pair": "value_presence", "a": 3}, 6.0)
    assert out == pytest.approx({"loss": 0.5, "forward": 0.5, "reverse": 0.5})
    assert set(out) == {"loss", "forward", "reverse"}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("not a dict", "spec"),
        ({}, "pair"),
        ({"pair": "value_swap"}, "pair"),
        ({"pair": 3}, "pair"),
        ({"pair": "value_change", "rule": "binary", "a": 1, "b": 2}, "rule"),
        ({"pair": "priors", "rule": "relaxed", "P": bern(0.1), "Q": bern(0.2)}, "rule"),
        ({"pair": "value_change", "a": 1}, "b"),
        ({"pair": "value_change", "a": 1, "b": 1}, "b"),
        ({"pair": "value_change", "a": 1, "b": 2, "P": bern(0.1)}, "P"),
        ({"pair": "value_presence", "a": math.nan}, "a"),
        ({"pair": "value_presence", "a": math.inf}, "a"),
        ({"pair": "value_presence", "a": "1"}, "a"),
        ({"pair": "distribution_presence", "P": [0, 1]}, "P"),
        ({"pair": "distribution_presence", "P": {"support": [0, 1]}}, "P.probs"),
        ({"pair": "distribution_presence", "P": {"support": [], "probs": []}}, "P.support"),
        ({"pair": "distribution_presence", "P": {"support": [0, 1], "probs": [0.5, 0.6]}},
         "P.probs"),
        ({"pair": "distribution_presence", "P": {"support": [0, 1], "probs": [1.5, -0.5]}},
         "P.probs"),
        ({"pair": "distribution_presence", "P": {"support": [1, 1], "probs": [0.5, 0.5]}},
         "P.support"),
        ({"pair": "distribution_presence", "P": {**bern(0.5), "x": 1}}, "P.x"),
        ({"pair": "distribution_change", "rule": "binary", "P": bern(0.5),
          "Q": {"support": [0, 2], "probs": [0.5, 0.5]}}, "Q"),
        ({"pair": "distribution_change", "rule": "relaxed", "P": bern(0.2), "Q": bern(0.9)},
         "rest"),
        ({"pair": "distribution_change", "rule": "bound", "P": bern(0.2), "Q": bern(0.9),
          "rest": bern(0.5)}, "rest"),
    ],
)
def test_bad_specs_name_the_field(spec: Any, field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        parse_spec(spec)
    assert info.value.field == field


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf])
def test_bad_epsilon(eps: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        calibrate_spec({"pair": "value_presence", "a": 1}, eps)
    assert info.value.field == "epsilon"


@pytest.mark.parametrize("theta", [-1.0, math.nan, math.inf])
def test_bad_theta(theta: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        audit_spec({"pair": "value_presence", "a": 1}, theta)
    assert info.value.field == "theta"


# ---- every emitted theta passes an independent audit -------------------------------------
small_dist = st.integers(min_value=1, max_value=4).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(-4, 6), min_size=n, max_size=n, unique=True),
        st.lists(st.integers(1, 9), min_size=n, max_size=n),
    )
).map(lambda t: {"support": t[0], "probs": [w / sum(t[1]) for w in t[1]]})
probability = st.integers(1, 19).map(lambda k: k / 20)

PAIR_RULES = {
    "distribution_presence": ["bound", "relaxed", "kantorovich", "exact"],
    "distribution_change": ["bound", "kantorovich", "exact"],
    "priors": ["kantorovich", "exact"],
}


@settings(max_examples=40, deadline=None)
@given(
    pair=st.sampled_from(sorted(PAIR_RULES)),
    rule_index=st.integers(0, 3),
    p=small_dist,
    q=small_dist,
    eps=st.sampled_from([0.1, 0.5, 1.0, 2.0]),
)
def test_every_theta_passes_the_grid_audit(
    pair: str, rule_index: int, p: dict[str, Any], q: dict[str, Any], eps: float
) -> None:
    rules = PAIR_RULES[pair]
    spec: dict[str, Any] = {"pair": pair, "rule": rules[rule_index % len(rules)], "P": p}
    second = DELTA0
    if pair != "distribution_presence":
        spec["Q"] = second = q
    result = calibrate_spec(spec, eps)
    if result["theta"] == 0:
        assert result["loss"] <= eps
        return
    assert grid_loss(p, second, result["theta"]) <= eps + 1e-9


@settings(max_examples=30, deadline=None)
@given(p=probability, q=probability, eps=st.sampled_from([0.05, 0.3, 1.0]),
       rest=small_dist, rule=st.sampled_from(["binary", "relaxed", "exact", "bound"]))
def test_bernoulli_change_rules_pass_on_own_pair_and_priors(
    p: float, q: float, eps: float, rest: dict[str, Any], rule: str
) -> None:
    spec: dict[str, Any] = {"pair": "distribution_change", "rule": rule, "P": bern(p),
                            "Q": bern(q)}
    if rule == "relaxed":
        spec["rest"] = rest
    result = calibrate_spec(spec, eps)
    if result["theta"] == 0:
        assert result["loss"] <= eps
        return
    assert grid_loss(bern(p), bern(q), result["theta"]) <= eps + 1e-9
    if rule == "relaxed":
        assert result["loss_priors"] <= eps + 1e-9


def test_parsing_and_auditing_a_spec_load_no_scipy() -> None:
    """`pufferfish audit` starts without scipy (~0.5 s): core.spec needs the vocabulary only;
    the learned priors' radius (scipy.special) is what loads it."""
    code = (
        "import sys; from core.spec import audit_spec, parse_spec; "
        "audit_spec({'pair': 'value_presence', 'a': 3}, 6.0); "
        "assert not any(m.startswith('scipy') for m in sys.modules), 'scipy loaded'; "
        "import pufferfish_core.learning_radius; assert 'scipy' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_calibrators_load_scipy_optimize_only_to_find_a_root() -> None:
    """scipy.optimize costs ~0.7 CPU-s per import: every worker and CLI start paid it for a root
    finder that only the relaxed presence rule's non-Bernoulli case runs."""
    code = (
        "import sys; import stream_app.faust_adapter.worker, pufferfish_core.calibrators as c; "
        "assert 'scipy.optimize' not in sys.modules, 'loaded at import'; "
        "from pufferfish_core.distribution import Distribution; "
        "c.distribution_presence_relaxed(Distribution.from_points([1, 3], [.5, .5]), 1.0); "
        "assert 'scipy.optimize' in sys.modules, 'the root finder ran without it?'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
