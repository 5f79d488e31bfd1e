"""The releaser's tree mode without a broker: the window's budget for its tree, and which
admitted sum a release of a window reads from partitions behind, in and ahead of it."""

from __future__ import annotations

from pufferfish_core.budget import Accountant
from stream_app.domain.models import Partial
from stream_app.release.tree_release import tree_epsilon, window_units
from stream_app.settings import Settings


def settings(**kw: object) -> Settings:
    base: dict[str, object] = dict(
        release_mechanism="tree", budget_window_seconds=86400, release_period_seconds=10,
        budget_total=10.0, epsilon_learn=0.1, learn_period_seconds=3600, metrics_port=None)
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def test_the_tree_gets_the_window_budget_minus_its_learning_rounds() -> None:
    s = settings()
    # window 0: ticks 0..8639, rounds on the first tick at or after each hour: 1 h .. 23 h
    assert tree_epsilon(s, 0) == 10.0 - 2.3
    # window 1: ticks 8640..17279: rounds at 24 h (tick 8640) .. 47 h: 24 of them
    assert tree_epsilon(s, 1) == 7.6
    books = Accountant(10.0)
    for _ in range(24):
        books.spend(0.1)
    books.spend(tree_epsilon(s, 1))  # exactly the budget: never over it
    assert books.remaining == 0.0 and not books.can_spend(1e-9)
    assert tree_epsilon(settings(prior_source="declared", priors_file="x.json"), 1) == 10.0
    assert tree_epsilon(settings(budget_total=2.0), 1) == 0.0  # the rounds take it all


def test_a_release_reads_each_partition_at_its_window() -> None:
    def part(p: int, raw: int, window: int | None, admitted: int | None = None,
             previous: int | None = None) -> Partial:
        return Partial(partition=p, sum_units=raw, window=window, admitted_units=admitted,
                       previous_units=previous)

    behind = part(0, 100, 4, 90, 80)  # no record consumed in window 5 yet: its base is raw
    inside = part(1, 50, 5, 40, 30)
    ahead = part(2, 70, 6, 60, 20)  # in window 6: window 5 ended at 20
    assert window_units([behind, inside, ahead], 5) == 100 + 40 + 20
    assert window_units([part(0, 7, None)], 5) == 7  # independent-mode partials: raw
    assert window_units([part(0, 7, 6, 7, None)], 5) is None  # window 5's end unknown
    assert window_units([part(0, 7, 7, 7, 3)], 5) is None  # two windows ahead
