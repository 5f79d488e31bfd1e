"""The releaser's tree mode without a broker: the window's budget for its tree, and which
admitted sum a release of a window reads from partitions behind, in and ahead of it."""

from __future__ import annotations

from pufferfish_core.budget import Accountant
from stream_app.domain.models import Partial
from stream_app.release.tree_release import partition_units, read_window, tree_epsilon
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


def part(p: int, raw: int, window: int | None, admitted: int | None = None,
         previous: int | None = None) -> Partial:
    return Partial(partition=p, sum_units=raw, window=window, admitted_units=admitted,
                   previous_units=previous)


def test_a_release_reads_each_partition_at_its_window() -> None:
    inside = part(1, 50, 5, 40, 30)
    ahead = part(2, 70, 6, 60, 20)  # in window 6: window 5 ended at 20
    got = read_window({1: inside, 2: ahead}, 5, partitions=3)
    assert got.waiting_for == (0,)  # partition 0 never published: wait for it
    got = read_window({0: part(0, 9, 5, 8, 1), 1: inside, 2: ahead}, 5, partitions=3)
    assert (got.waiting_for, got.units, got.snapshot) == ((), 8 + 40 + 20, 8 + 40 + 20)
    assert partition_units(inside, 5) == 40 and partition_units(ahead, 5) == 20


def test_a_partition_behind_the_window_is_waited_for_never_read() -> None:
    """Its raw sum is the window's base only if no change reached it after that partial: a
    worker killed (or a partial delayed) at the boundary would show a change of the window
    before inside this one, one more than w. So a tick of window 5 waits for every partition
    to show window 5 or later."""
    for stale in (part(0, 100, 4, 90, 80), part(0, 7, None),  # behind; independent mode
                  part(0, 7, 5, None)):  # no admitted sum
        got = read_window({0: stale, 1: part(1, 50, 5, 40, 30)}, 5, partitions=2)
        assert got.waiting_for == (0,), stale
    extra = read_window({0: part(0, 1, 5, 1), 3: part(3, 2, 4, 2)}, 5, partitions=1)
    assert extra.waiting_for == (3,)  # a partition beyond the setting counts too


def test_a_partition_that_cannot_tell_the_window_freezes_it() -> None:
    two_ahead = part(0, 70, 7, 60, 30)  # window 6's final only: window 5's is gone
    got = read_window({0: two_ahead, 1: part(1, 50, 5, 40, 30)}, 5, partitions=2)
    assert (got.waiting_for, got.units) == ((), None)
    assert got.snapshot == 70 + 40  # current contributions: the base if the window has none
    assert partition_units(part(0, 7, 6, 7, None), 5) is None  # window 5's end unknown
