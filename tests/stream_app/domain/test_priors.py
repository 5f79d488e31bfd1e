"""stream_app.domain.priors: configured groups, round-0 laws, the start-up check (no broker).

Expected thetas are derived by hand (Thm 1 |a-b|/eps, Thm 2 |a|/eps, Thm 3 max|t|/eps) or, for
the exact rule, checked with the independent exact audit (core.auditor.audit): the returned
theta passes the audit and 0.999 * theta fails it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.vocabulary import PairKind, Rule
from stream_app.domain.priors import (
    FALLBACK_GROUP,
    checked_start,
    learner_for,
    load_priors,
    plan_for,
    public_priors,
)
from stream_app.settings import Settings

pytestmark = pytest.mark.usefixtures("clean_env")


def _write(tmp_path: Path, doc: Any, name: str = "priors.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _law(points: dict[float, float]) -> dict[str, list[float]]:
    return {"support": list(points), "probs": list(points.values())}


def _same_law(got: Distribution, support: list[float], probs: list[float]) -> None:
    assert list(got.support) == pytest.approx(support)
    assert list(got.probs) == pytest.approx(probs, rel=1e-12)


def _settings(**kw: Any) -> Settings:
    return Settings(**kw)


# ---- load_priors -----------------------------------------------------------------------------
def test_load_priors_reads_every_group(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": _law({0: 0.25, 2: 0.75}), "b": _law({1: 1.0})})
    got = load_priors(path)
    assert set(got) == {"a", "b"}
    _same_law(got["a"], [0, 2], [0.25, 0.75])
    _same_law(got["b"], [1], [1.0])


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("{not json", "priors_file"),
        ("[]", "priors_file"),
        ("{}", "priors_file"),
        ('"text"', "priors_file"),
        ('{"g": [0, 1]}', "priors_file.g"),
        ('{"g": {"support": [0, 1], "probs": [0.5, 0.6]}}', "priors_file.g.probs"),
        ('{"g": {"probs": [1.0]}}', "priors_file.g.support"),
        ('{"g": {"support": [0, 1], "probs": [NaN, 1]}}', "priors_file.g.probs"),
    ],
)
def test_load_priors_bad_content_names_the_field(
    tmp_path: Path, content: str, field: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PufferfishInputError) as info:
        load_priors(path)
    assert info.value.field == field


def test_load_priors_missing_file_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(PufferfishInputError) as info:
        load_priors(tmp_path / "nope.json")
    assert info.value.field == "priors_file"
    with pytest.raises(PufferfishInputError) as info:
        load_priors(tmp_path)  # a directory
    assert info.value.field == "priors_file"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"\xff\xfe\x00not utf-8", id="not-utf8"),
        pytest.param(b"[" * 200_000, id="nested-too-deep"),
        pytest.param(b'{"g": {"support": [' + b"1" * 5000 + b'], "probs": [1]}}', id="huge-int"),
    ],
)
def test_load_priors_unreadable_bytes_are_an_input_error(tmp_path: Path, raw: bytes) -> None:
    """Any file that is not a JSON document must be ONE PufferfishInputError on priors_file
    (the CLI prints it as `pufferfish: error: priors_file: ...`), never another exception."""
    path = tmp_path / "p.json"
    path.write_bytes(raw)
    with pytest.raises(PufferfishInputError) as info:
        load_priors(path)
    assert info.value.field == "priors_file"


# ---- public_priors: configured groups and default group --------------------------------------
def test_no_groups_at_all_is_one_default_group_uniform() -> None:
    pp = public_priors(_settings(domain=[0, 1, 2, 3]))
    assert pp.groups == frozenset({"default"}) and FALLBACK_GROUP == "default"
    assert pp.default_group == "default"
    _same_law(pp.laws["default"], [0, 1, 2, 3], [0.25] * 4)


def test_configured_groups_are_the_union(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": _law({0: 1.0}), "b": _law({1: 1.0})})
    s = _settings(domain=[0, 1, 2], priors_file=str(path), groups=["b", "c"], default_group="d")
    pp = public_priors(s)
    assert pp.groups == frozenset({"a", "b", "c", "d"})
    assert pp.default_group == "d"
    _same_law(pp.laws["a"], [0], [1.0])
    _same_law(pp.laws["b"], [1], [1.0])
    for g in ("c", "d"):  # learned groups without a declared law start uniform
        _same_law(pp.laws[g], [0, 1, 2], [1 / 3] * 3)


def test_default_group_is_the_only_group(tmp_path: Path) -> None:
    assert public_priors(_settings(groups=["solo"])).default_group == "solo"
    assert public_priors(_settings(default_group="x")).groups == frozenset({"x"})
    path = _write(tmp_path, {"only": _law({0: 0.5, 1: 0.5})})
    pp = public_priors(_settings(prior_source="declared", priors_file=str(path)))
    assert pp.default_group == "only" and pp.groups == frozenset({"only"})


def test_several_groups_without_default_group_have_none(tmp_path: Path) -> None:
    assert public_priors(_settings(groups=["a", "b"])).default_group is None
    path = _write(tmp_path, {"a": _law({0: 1.0}), "b": _law({1: 1.0})})
    pp = public_priors(_settings(prior_source="declared", priors_file=str(path)))
    assert pp.default_group is None
    pp = public_priors(
        _settings(prior_source="declared", priors_file=str(path), default_group="b")
    )
    assert pp.default_group == "b" and pp.groups == frozenset({"a", "b"})


def test_learned_group_with_declared_law_starts_from_it(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": _law({0: 0.9, 2: 0.1})})
    pp = public_priors(_settings(domain=[0, 1, 2], priors_file=str(path), groups=["z"]))
    _same_law(pp.laws["a"], [0, 2], [0.9, 0.1])
    _same_law(pp.laws["z"], [0, 1, 2], [1 / 3] * 3)


def test_declared_group_without_law_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": _law({0: 1.0})})
    with pytest.raises(PufferfishInputError) as info:
        public_priors(_settings(prior_source="declared", priors_file=str(path), groups=["b"]))
    assert info.value.field == "groups" and "'b'" in info.value.message


def test_declared_default_group_without_law_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": _law({0: 1.0})})
    with pytest.raises(PufferfishInputError) as info:
        public_priors(
            _settings(prior_source="declared", priors_file=str(path), default_group="b")
        )
    assert info.value.field == "default_group" and "'b'" in info.value.message


@pytest.mark.parametrize("source", ["declared", "learned"])
def test_law_outside_the_domain_is_an_error(tmp_path: Path, source: str) -> None:
    path = _write(tmp_path, {"ok": _law({0: 1.0}), "bad": _law({0: 0.5, 9: 0.5})})
    with pytest.raises(PufferfishInputError) as info:
        public_priors(_settings(domain=[0, 1, 2], prior_source=source, priors_file=str(path)))
    assert info.value.field == "priors_file.bad.support"
    assert "9" in info.value.message


def test_distribution_change_needs_two_groups(tmp_path: Path) -> None:
    with pytest.raises(PufferfishInputError) as info:
        public_priors(_settings(pairs=["distribution_change"]))
    assert info.value.field == "pairs"
    path = _write(tmp_path, {"a": _law({0: 1.0})})
    with pytest.raises(PufferfishInputError) as info:
        public_priors(
            _settings(pairs=["distribution_change"], prior_source="declared", priors_file=str(path))
        )
    assert info.value.field == "pairs"
    # a second configured group (learned, uniform) is enough
    pp = public_priors(_settings(pairs=["distribution_change"], groups=["a", "b"]))
    assert pp.groups == frozenset({"a", "b"})


def test_public_priors_reads_no_user_data_and_is_deterministic(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": _law({0: 0.3, 1: 0.7})})
    s = _settings(priors_file=str(path), groups=["b"])
    assert public_priors(s) == public_priors(s)


# ---- plan_for / checked_start ----------------------------------------------------------------
def test_plan_for_theorem_1_and_2_bounds() -> None:
    s = _settings(domain=[0, 1, 2, 3, 5], pairs=["value_change", "value_presence"],
                  rule="bound", epsilon=0.5)
    laws = {
        "a": Distribution.from_points([1, 3], [0.5, 0.5]),
        "b": Distribution.from_points([0, 5], [0.9, 0.1]),
    }
    plan = plan_for(s, laws, {})
    # Thm 1: |a - b| / eps over supp; Thm 2: max |a| / eps
    assert plan.groups["a"][PairKind.VALUE_CHANGE] == pytest.approx(2 / 0.5)
    assert plan.groups["a"][PairKind.VALUE_PRESENCE] == pytest.approx(3 / 0.5)
    assert plan.groups["b"][PairKind.VALUE_CHANGE] == pytest.approx(5 / 0.5)
    assert plan.groups["b"][PairKind.VALUE_PRESENCE] == pytest.approx(5 / 0.5)
    assert plan.theta == pytest.approx(10.0)
    assert plan.binding_group == "b" and plan.binding_pair is PairKind.VALUE_CHANGE
    assert plan.epsilon == 0.5 and plan.grid_log2 == s.grid_log2
    assert plan.charge() == pytest.approx(0.5)  # spread 5 / theta 10 = eps


def test_plan_for_theorem_3_bound_uses_the_given_laws() -> None:
    s = _settings(domain=[-4, 0, 1, 2], rule="bound", epsilon=2.0)
    plan = plan_for(s, {"g": Distribution.from_points([-4, 2], [0.5, 0.5])}, {})
    assert plan.theta == pytest.approx(4 / 2.0)  # max |t| / eps


def test_plan_for_exact_passes_audit_and_is_smallest() -> None:
    s = _settings(domain=[0, 1, 2, 3], epsilon=0.7, rule="exact")
    law = Distribution.from_points([0, 1, 3], [0.5, 0.3, 0.2])
    plan = plan_for(s, {"g": law}, {})
    zero = Distribution.point(0.0)
    assert audit(law, zero, plan.theta).loss <= 0.7 + 1e-9
    assert audit(law, zero, 0.999 * plan.theta).loss > 0.7


def test_checked_start_returns_the_round0_plan(tmp_path: Path) -> None:
    path = _write(tmp_path, {"g": _law({0: 0.5, 3: 0.5})})
    s = _settings(domain=[0, 1, 2, 3], prior_source="declared", priors_file=str(path),
                  pairs=["value_presence"], rule="bound", epsilon=0.25)
    priors, plan = checked_start(s)
    assert priors.groups == frozenset({"g"}) and priors.default_group == "g"
    assert plan.theta == pytest.approx(3 / 0.25)
    assert plan.binding_group == "g" and plan.binding_pair is PairKind.VALUE_PRESENCE


@pytest.mark.parametrize(
    ("law", "pairs"),
    [
        ({0: 1.0}, ["value_presence"]),
        ({0: 1.0}, ["value_presence", "value_change", "distribution_presence"]),
        ({2: 1.0}, ["value_change"]),  # a point mass: no value change possible
    ],
)
def test_checked_start_refuses_a_configuration_without_noise(
    tmp_path: Path, law: dict[float, float], pairs: list[str]
) -> None:
    path = _write(tmp_path, {"g": _law(law)})
    s = _settings(domain=[0, 1, 2], prior_source="declared", priors_file=str(path), pairs=pairs)
    with pytest.raises(PufferfishInputError) as info:
        checked_start(s)
    assert info.value.field == "pairs"
    assert "no configured pair needs noise" in info.value.message


def test_checked_start_propagates_public_priors_errors() -> None:
    with pytest.raises(PufferfishInputError) as info:
        checked_start(_settings(pairs=["distribution_change"]))
    assert info.value.field == "pairs"
    assert "two" in info.value.message


def test_checked_start_theta_over_every_configured_group(tmp_path: Path) -> None:
    """theta is the max over configured groups, including one nobody may ever join."""
    path = _write(tmp_path, {"small": _law({0: 0.5, 1: 0.5}), "big": _law({0: 0.5, 6: 0.5})})
    s = _settings(domain=list(range(7)), prior_source="declared", priors_file=str(path),
                  pairs=["distribution_presence"], rule="bound", epsilon=1.0)
    _, plan = checked_start(s)
    assert plan.theta == pytest.approx(6.0) and plan.binding_group == "big"
    assert plan.groups["small"][PairKind.DISTRIBUTION_PRESENCE] == pytest.approx(1.0)


# ---- learner_for -----------------------------------------------------------------------------
def test_learner_for_declared_is_none(tmp_path: Path) -> None:
    path = _write(tmp_path, {"g": _law({0: 1.0})})
    assert learner_for(_settings(prior_source="declared", priors_file=str(path))) is None


def test_learner_for_learned_uses_the_settings() -> None:
    s = _settings(domain=[0, 1, 2], epsilon_learn=0.3, prior_floor=0.2, learn_min_mass=4.0,
                  rule=Rule.EXACT)
    learner = learner_for(s)
    assert learner is not None
    assert learner.domain == (0.0, 1.0, 2.0)
    assert learner.epsilon_learn == 0.3 and learner.charge() == 0.3
    assert learner.floor == 0.2 and learner.min_mass == 4.0


def test_a_declared_radius_is_read_and_checked(tmp_path: Path) -> None:
    from stream_app.domain.priors import load_priors_and_radii

    path = tmp_path / "p.json"
    path.write_text(json.dumps({"a": {"support": [0, 1], "probs": [0.5, 0.5], "radius": 0.25},
                                "b": {"support": [0, 1], "probs": [0.1, 0.9]}}))
    laws, radii = load_priors_and_radii(path)
    assert radii == {"a": 0.25, "b": 0.0} and laws["a"].prob(1.0) == 0.5
    # >= 2 is the whole simplex: a larger radius is clamped at load, so no PriorsRecord (radius
    # <= 2) republishing it can fail after a learning round's charge
    path.write_text(json.dumps({"a": {"support": [0, 1], "probs": [0.5, 0.5], "radius": 5},
                                "b": {"support": [0, 1], "probs": [0.5, 0.5], "radius": 2.0}}))
    assert load_priors_and_radii(path)[1] == {"a": 2.0, "b": 2.0}
    for bad in (-0.1, "x", float("nan")):
        path.write_text(json.dumps({"a": {"support": [0], "probs": [1], "radius": bad}})
                        .replace("NaN", "NaN"))
        with pytest.raises(PufferfishInputError) as info:
            load_priors_and_radii(path)
        assert info.value.field == "priors_file.a.radius"


def test_a_declared_radius_of_two_is_the_worst_case_over_the_domain(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"a": {"support": [0, 1], "probs": [0.9, 0.1], "radius": 2},
                                "b": {"support": [0, 1], "probs": [0.9, 0.1]}}))
    s = _settings(domain=[0, 1, 4], prior_source="declared", priors_file=str(path),
                  pairs=["distribution_presence"], epsilon=0.5, rule="exact")
    _, plan = checked_start(s)
    # the ball of radius 2 holds delta_4: theta = max |t| / eps over the domain = 4 / 0.5
    assert plan.theta == pytest.approx(8.0, rel=1e-9) and plan.binding_group == "a"
    assert plan.groups["b"][PairKind.DISTRIBUTION_PRESENCE] < 2.0  # b is exact: {0: .9, 1: .1}
