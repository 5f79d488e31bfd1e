"""Glue to core.user_theta: estimates from state, priors file, cache (no broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.auditor import audit
from core.distribution import Distribution, point_zero
from core.errors import PufferfishInputError
from core.user_theta import PairKind, user_theta
from stream_app.calibration import UserCalibrator, load_priors
from stream_app.settings import Settings
from stream_app.state import UserState

PRIORS = {
    "a": {"support": [0, 1], "probs": [0.5, 0.5]},
    "b": {"support": [0, 1], "probs": [0.9, 0.1]},
}


def priors_file(tmp_path: Path, doc: object = PRIORS) -> Path:
    path = tmp_path / "priors.json"
    path.write_text(json.dumps(doc))
    return path


def test_learned_estimate_is_the_histogram(tmp_path: Path) -> None:
    s = Settings(
        domain=[0, 1, 2], pairs=["distribution_presence", "value_change"], metrics_port=None
    )
    cal = UserCalibrator(s, {})
    state = UserState(partition=0, present=True, counts=(2, 0, 6))
    theta, spread, binding = cal(state)
    # independent: P_i = {0: 1/4, 2: 3/4}; value_change needs |2 - 0| / eps = 2, the larger one
    assert theta == pytest.approx(2.0) and binding == "value_change"
    p = Distribution.from_points([0.0, 2.0], [0.25, 0.75])
    assert audit(p, point_zero(), theta).loss <= 1.0 + 1e-9
    # same proportions -> same answer (cache key is the reduced histogram)
    assert cal(UserState(partition=0, present=True, counts=(1, 0, 3))) == (theta, spread, binding)
    # absent: value_change disappears, presence stays
    absent = cal(UserState(partition=0, present=False, counts=(2, 0, 6)))
    direct = user_theta(p, False, None, frozenset({PairKind.DISTRIBUTION_PRESENCE,
                                                   PairKind.VALUE_CHANGE}), 1.0)
    assert absent[0] == pytest.approx(direct.theta) and absent[0] < theta
    assert cal(UserState(partition=0, present=True, counts=(0, 0, 0))) == (0.0, 0.0, None)


def test_declared_priors_use_the_group(tmp_path: Path) -> None:
    s = Settings(domain=[0, 1], prior_source="declared", priors_file=priors_file(tmp_path),
                 pairs=["distribution_change"], metrics_port=None)
    refs = load_priors(s.priors_file)  # type: ignore[arg-type]
    cal = UserCalibrator(s, refs)
    theta_a, _, pair = cal(UserState(partition=0, present=True, group="a"))
    assert pair == "distribution_change" and theta_a > 0
    # the own group's reference is excluded: the pair is (P_a, Q_b)
    assert audit(refs["a"], refs["b"], theta_a).loss <= 1.0 + 1e-9
    assert cal(UserState(partition=0, present=True, group=None)) == (0.0, 0.0, None)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "priors_file"),
        ({}, "priors_file"),
        ({"a": 3}, "priors_file.a"),
        ({"a": {"support": [0, 1], "probs": [0.5, 0.6]}}, "priors_file.a.probs"),
    ],
)
def test_bad_priors_file_names_the_field(tmp_path: Path, doc: object, field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        load_priors(priors_file(tmp_path, doc))
    assert info.value.field == field


def test_missing_priors_file(tmp_path: Path) -> None:
    with pytest.raises(PufferfishInputError, match="priors_file"):
        load_priors(tmp_path / "nope.json")
