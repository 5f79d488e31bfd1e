"""Distribution: construction, validation (one error type naming the field), operations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError


def test_from_points_sorts_pairs_and_keeps_zero_mass_points() -> None:
    d = Distribution.from_points([3, 1, 2], [0.2, 0.8, 0.0])
    assert d.support == (1.0, 2.0, 3.0)
    assert d.probs == (0.8, 0.0, 0.2)
    assert d.positive_support() == (1.0, 3.0)


def test_renormalises_within_tolerance() -> None:
    d = Distribution.from_points([0, 1], [0.5, 0.5 + 5e-10])
    assert math.fsum(d.probs) == pytest.approx(1.0, abs=1e-15)


def test_from_counts() -> None:
    d = Distribution.from_counts([10, 20, 30], [1, 0, 3])
    assert d.support == (10.0, 20.0, 30.0)
    assert d.probs == (0.25, 0.0, 0.75)


def test_bernoulli_and_point() -> None:
    assert Distribution.bernoulli(0.3).probs == pytest.approx((0.7, 0.3))
    assert Distribution.bernoulli(0.0).support == (0.0, 1.0)
    assert Distribution.point(-2.5).support == (-2.5,)
    assert Distribution.bernoulli(0.3).bernoulli_p() == pytest.approx(0.3)
    assert Distribution.point(1).is_bernoulli()
    assert not Distribution.point(2).is_bernoulli()


def test_cdf_and_mean() -> None:
    d = Distribution.from_points([1, 2, 4], [0.1, 0.3, 0.6])
    assert d.cdf(0.5) == 0.0
    assert d.cdf(1) == pytest.approx(0.1)
    assert d.cdf(3.9) == pytest.approx(0.4)
    assert d.cdf(4) == 1.0
    assert d.cdf(100) == 1.0
    assert d.mean() == pytest.approx(0.1 + 0.6 + 2.4)


def test_shift() -> None:
    d = Distribution.from_points([1, 2], [0.4, 0.6]).shift(3)
    assert d.support == (4.0, 5.0)
    assert d.probs == (0.4, 0.6)


def test_convolve_two_dice_by_hand() -> None:
    die = Distribution.from_points(range(1, 7), [1 / 6] * 6)
    two = die.convolve(die)
    assert two.support == tuple(float(s) for s in range(2, 13))
    expected = [min(s - 1, 13 - s) / 36 for s in range(2, 13)]
    np.testing.assert_allclose(two.probs, expected, rtol=1e-12)


def test_convolve_merges_float_sums() -> None:
    a = Distribution.from_points([0.1, 0.2], [0.5, 0.5])
    b = Distribution.from_points([0.2, 0.1], [0.5, 0.5])
    s = a.convolve(b)  # 0.1 + 0.2 and 0.2 + 0.1 differ in the last bit
    assert len(s.support) == 3
    assert s.probs == pytest.approx((0.25, 0.5, 0.25))


def test_convolve_keeps_zero_mass_lattice_points() -> None:
    s = Distribution.from_points([0, 1], [1.0, 0.0]).convolve(Distribution.point(5))
    assert s.support == (5.0, 6.0)
    assert s.probs == (1.0, 0.0)


def test_arrays_are_read_only() -> None:
    xs, ps = Distribution.bernoulli(0.5).arrays()
    with pytest.raises(ValueError):
        xs[0] = 3.0
    with pytest.raises(ValueError):
        ps[0] = 3.0


def test_frozen_and_hashable() -> None:
    d = Distribution.point(1)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        d.support = (2.0,)
    assert d == Distribution.point(1.0)
    assert Distribution.model_validate({"support": [1], "probs": [1]}) == d


BAD = [
    ({"support": [], "probs": []}, "support"),
    ({"support": [1, float("nan")], "probs": [0.5, 0.5]}, "support"),
    ({"support": [1, float("inf")], "probs": [0.5, 0.5]}, "support"),
    ({"support": [1, 2], "probs": [0.5, float("nan")]}, "probs"),
    ({"support": [1, 2], "probs": [1.5, -0.5]}, "probs"),
    ({"support": [1, 2], "probs": [0.5, 0.6]}, "probs"),
    ({"support": [1, 2], "probs": [0.5, 0.5 + 2e-9]}, "probs"),
    ({"support": [1, 2, 3], "probs": [0.5, 0.5]}, "probs"),
    ({"support": [1, 1], "probs": [0.5, 0.5]}, "support"),
    ({"support": "12", "probs": [1.0]}, "support"),
    ({"support": [[1, 2]], "probs": [1.0]}, "support"),
    ({"support": [True], "probs": [1.0]}, "support"),
    ({"probs": [1.0]}, "support"),
    ({"support": [1.0]}, "probs"),
]


@pytest.mark.parametrize(("kwargs", "field"), BAD)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("kwargs", "field"), BAD[:3])
def test_model_validate_raises_the_same_error(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution.model_validate(kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("values", "counts", "field"),
    [
        ([1, 2], [0, 0], "counts"),
        ([1, 2], [1, -1], "counts"),
        ([1, 2], [1], "counts"),
        ([1, 1], [1, 2], "values"),
        ([1, float("nan")], [1, 2], "values"),
        ([1, 2], [1, float("inf")], "counts"),
    ],
)
def test_bad_counts(values: list[float], counts: list[float], field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution.from_counts(values, counts)
    assert info.value.field == field


@pytest.mark.parametrize("p", (-0.1, 1.1, float("nan")))
def test_bad_bernoulli(p: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution.bernoulli(p)
    assert info.value.field == "p"


def test_bad_point_and_shift() -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution.point(float("inf"))
    assert info.value.field == "a"
    with pytest.raises(PufferfishInputError):
        Distribution.point(0).shift(float("nan"))


def test_bernoulli_p_refuses_other_laws() -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution.from_points([0, 2], [0.5, 0.5]).bernoulli_p()
    assert info.value.field == "distribution"


def test_equality_ignores_cached_arrays() -> None:
    c = Distribution.from_points([1, 2], [0.5, 0.5])
    d = Distribution.from_points([2, 1], [0.5, 0.5])
    c.arrays()
    assert c == d and d == c
    d.arrays()
    assert c == d
    assert {c: 1}[d] == 1
    assert c != Distribution.from_points([1, 2], [0.4, 0.6])


def test_json_round_trip_and_bad_json() -> None:
    d = Distribution.from_points([0, 2], [0.25, 0.75])
    assert Distribution.model_validate_json(d.model_dump_json()) == d
    with pytest.raises(PufferfishInputError) as info:
        Distribution.model_validate_json('{"support": [0, 2], "probs": [0.25, 0.8]}')
    assert info.value.field == "probs"
