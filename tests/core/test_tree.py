"""core.tree: the window's node scale, charge and predicted noise; the real sampler's spread."""

from __future__ import annotations

import math
import statistics

import pytest

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.tree import independent_noise_sd, tree_mechanism
from pufferfish_core.tree_shape import BASE_ID, TreeShape
from pufferfish_core.vocabulary import PairKind

KINDS = [PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE]
DOMAIN = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_scale_charge_and_noise_of_a_window() -> None:
    tree = tree_mechanism(360, 1, KINDS, 5.0, DOMAIN, 1.2, grid_log2=0, arity=8)
    # one change, one sign: the base (5) and one node move of 5 on each of the levels of
    # 1, 8 and 64 ticks (n = 359 < 512): Delta = 5 + 3 * 5 = 20 (worked by hand)
    assert tree.sensitivity == 20.0
    assert tree.scale == pytest.approx(20.0 / 1.2) and tree.charge() <= 1.2
    draws = TreeShape(360, 8).draws_per_tick()
    assert draws[0] == 1 and draws[359] == 1 + 5 + 4 + 7  # 359 = 5*64 + 4*8 + 7
    q = math.exp(-1.0 / tree.scale)
    node_sd = math.sqrt(2 * q) / (1 - q)
    assert tree.noise_sd_at(359) == pytest.approx(node_sd * math.sqrt(17))
    assert tree.noise_sd() == pytest.approx(node_sd * math.sqrt(draws.mean()))
    assert tree.draws(10) == [BASE_ID, "1.0", "0.8", "0.9"]


def test_the_picked_arity_has_the_smallest_predicted_noise() -> None:
    best = tree_mechanism(8640, 4, KINDS, 5.0, DOMAIN, 1.0)
    for arity in range(2, 17):
        other = tree_mechanism(8640, 4, KINDS, 5.0, DOMAIN, 1.0, arity=arity)
        assert best.noise_sd() <= other.noise_sd()
    # the setting: >= 10x less noise than independent releases at the same budget
    assert independent_noise_sd(8640, 5.0, 1.0) / best.noise_sd() > 100


def test_w_zero_is_the_base_alone() -> None:
    tree = tree_mechanism(8640, 0, KINDS, 5.0, DOMAIN, 1.0)
    assert tree.sensitivity == 5.0 and tree.draws(8639) == [BASE_ID]
    assert tree.noise_sd() == pytest.approx(tree.node_sd())


def test_the_sampler_draws_at_the_node_scale() -> None:
    tree = tree_mechanism(16, 1, KINDS, 5.0, DOMAIN, 0.1, grid_log2=0, arity=2)
    sample = [tree.draw_units() for _ in range(3000)]
    # sd of the sample within 20 % (about 8 standard errors for 3,000 Laplace draws)
    assert statistics.pstdev(sample) == pytest.approx(tree.node_sd(), rel=0.2)


@pytest.mark.parametrize(("args", "field"), [
    ((0, 1, KINDS, 5.0, DOMAIN, 1.0), "ticks"),
    ((10, -1, KINDS, 5.0, DOMAIN, 1.0), "max_changes_per_window"),
    ((10, 1, KINDS, 5.0, DOMAIN, 0.0), "epsilon"),
    ((10, 1, [], 5.0, DOMAIN, 1.0), "pairs"),
])
def test_bad_input_names_its_field(args: tuple[object, ...], field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        tree_mechanism(*args)  # type: ignore[arg-type]
    assert info.value.field == field


def test_arity_below_two_is_refused() -> None:
    with pytest.raises(PufferfishInputError, match="arity"):
        tree_mechanism(10, 1, KINDS, 5.0, DOMAIN, 1.0, arity=1)
