"""stream_app.release.restore: budget, seqs and laws in force from the journals (pure, no I/O).

Expected values are hand sums (exact Fractions of the decimal charges) and hand-picked records.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from pufferfish_core.budget import Accountant, BudgetExhausted
from pufferfish_core.distribution import Distribution
from stream_app.domain.models import PriorsRecord, Release
from stream_app.release.local_state import LocalState
from stream_app.release.restore import Restored, accountant_at_least, laws_in_force, restore

A0 = Distribution.from_points([0, 1, 2], [1 / 3, 1 / 3, 1 / 3])
B0 = Distribution.from_points([0, 2], [0.5, 0.5])
INITIAL = {"a": A0, "b": B0}


def _release(seq: int, spent: float, total: float = 10.0) -> Release:
    return Release(seq=seq, ts=float(seq), noisy_sum=1.25, theta=2.0, epsilon=0.5,
                   epsilon_spent=spent, epsilon_remaining=total - spent,
                   pairs=["distribution_presence"], rule="exact", charge=0.5)


def _priors(seq: int, group: str, probs: list[float], spent: float = 0.1,
            support: list[float] | None = None) -> PriorsRecord:
    return PriorsRecord(seq=seq, ts=float(seq), group=group,
                        support=support if support is not None else [0.0, 1.0, 2.0][: len(probs)],
                        probs=probs, epsilon_learn=0.1, epsilon_spent=spent)


def _accountant(total: float, charges: list[float]) -> Accountant:
    acc = Accountant(total)
    for c in charges:
        acc.spend(c)
    return acc


def _exact_spent(acc: Accountant) -> Fraction:
    return sum((Fraction(repr(c)) for c in acc.charges), Fraction(0))


# ---- accountant_at_least ---------------------------------------------------------------------
def test_accountant_at_least_zero_is_fresh() -> None:
    acc = accountant_at_least(5.0, 0.0)
    assert acc.total == 5.0 and acc.spent == 0.0 and acc.releases == 0


def test_accountant_at_least_one_charge() -> None:
    acc = accountant_at_least(5.0, 2.25)
    assert acc.spent == 2.25 and acc.charges == [2.25] and acc.remaining == 2.75


def test_accountant_at_least_exactly_full() -> None:
    acc = accountant_at_least(1.0, 1.0)
    assert acc.remaining == 0.0 and not acc.can_spend(1e-12)


def test_accountant_at_least_over_total_raises() -> None:
    with pytest.raises(BudgetExhausted):
        accountant_at_least(1.0, 1.5)


# ---- restore: budget -------------------------------------------------------------------------
def _restore(total: float = 10.0, releases: list[Release] | None = None,
             priors: list[PriorsRecord] | None = None, local: LocalState | None = None,
             known: Accountant | None = None, last_seq: int = 0) -> Restored:
    return restore(total, releases or [], priors or [], local,
                   known if known is not None else Accountant(total), last_seq, INITIAL)


def test_nothing_anywhere_is_a_fresh_start() -> None:
    got = _restore()
    assert got.accountant.spent == 0.0 and got.accountant.total == 10.0
    assert (got.last_seq, got.last_priors_seq, got.priors_seq) == (0, 0, 0)
    assert got.laws == INITIAL and got.exhausted is None


def test_budget_is_the_releases_journal_max() -> None:
    # journal order is not spent order: the max counts, not the last record
    got = _restore(releases=[_release(1, 0.5), _release(3, 1.5), _release(2, 1.0)],
                   priors=[_priors(1, "a", [0.2, 0.3, 0.5], spent=1.2)],
                   local=LocalState(2, _accountant(10.0, [0.7])))
    assert got.accountant.spent == 1.5 and got.accountant.total == 10.0
    assert got.accountant.remaining == 8.5 and got.exhausted is None


def test_budget_is_the_priors_journal_max() -> None:
    got = _restore(releases=[_release(1, 0.5)],
                   priors=[_priors(1, "a", [0.2, 0.3, 0.5], spent=0.6),
                           _priors(1, "b", [0.5, 0.5], spent=2.6, support=[0, 2])],
                   local=LocalState(1, _accountant(10.0, [0.5])))
    assert got.accountant.spent == 2.6


def test_budget_is_the_local_file_with_its_exact_charges() -> None:
    local = _accountant(10.0, [0.1] * 7 + [0.25])
    got = _restore(releases=[_release(1, 0.5)], priors=[_priors(1, "a", [1, 0, 0], spent=0.6)],
                   local=LocalState(8, local))
    assert got.accountant.charges == [0.1] * 7 + [0.25]
    assert _exact_spent(got.accountant) == Fraction(7, 10) + Fraction(1, 4)
    assert got.accountant.remaining == float(10 - Fraction(95, 100))


def test_budget_is_the_known_accountant_when_it_is_ahead() -> None:
    known = _accountant(10.0, [0.5] * 6)
    got = _restore(releases=[_release(2, 1.0)], local=LocalState(2, _accountant(10.0, [0.5] * 2)),
                   known=known)
    assert got.accountant.spent == 3.0 and got.accountant.releases == 6


def test_local_file_lost_journal_still_counts() -> None:
    got = _restore(releases=[_release(4, 2.0), _release(5, 2.5)], local=None)
    assert got.accountant.spent == 2.5 and got.last_seq == 5
    assert not got.accountant.can_spend(7.5 + 1e-9) and got.accountant.can_spend(7.5)


def test_journal_over_budget_is_exhausted() -> None:
    got = _restore(total=2.0, releases=[_release(1, 1.0), _release(2, 2.5)])
    assert got.exhausted is not None and "budget_total" in got.exhausted


def test_priors_journal_over_budget_is_exhausted() -> None:
    got = _restore(total=2.0, priors=[_priors(1, "a", [1, 0, 0], spent=2.1)])
    assert got.exhausted is not None


def test_journal_exactly_at_budget_is_not_exhausted_but_full() -> None:
    got = _restore(total=2.0, releases=[_release(4, 2.0)])
    assert got.exhausted is None
    assert got.accountant.remaining == 0.0 and not got.accountant.can_spend(0.001)


def test_ten_tenths_fill_one_exactly() -> None:
    local = _accountant(1.0, [0.1] * 10)
    got = _restore(total=1.0, releases=[_release(10, 1.0, total=1.0)],
                   local=LocalState(10, local))
    assert got.exhausted is None and got.accountant.remaining == 0.0


# ---- restore: changed budget_total -----------------------------------------------------------
def test_raised_budget_total_replays_the_exact_charges() -> None:
    charges = [0.1, 0.1, 0.1, 0.25, 0.3]
    got = _restore(total=20.0, local=LocalState(5, _accountant(10.0, charges)),
                   known=Accountant(20.0))
    assert got.accountant.total == 20.0 and got.accountant.charges == charges
    assert _exact_spent(got.accountant) == Fraction(85, 100)
    assert got.accountant.can_spend(19.15) and not got.accountant.can_spend(19.150000001)
    assert got.exhausted is None


def test_lowered_budget_total_still_fitting() -> None:
    got = _restore(total=4.0, local=LocalState(3, _accountant(10.0, [1.0, 1.0, 1.0])),
                   known=Accountant(4.0))
    assert got.accountant.total == 4.0 and got.accountant.spent == 3.0
    assert got.accountant.remaining == 1.0 and got.exhausted is None


def test_lowered_budget_total_below_spent_is_exhausted() -> None:
    got = _restore(total=2.0, local=LocalState(3, _accountant(10.0, [1.0, 1.0, 1.0])),
                   known=Accountant(2.0))
    assert got.exhausted is not None and "budget_total" in got.exhausted


def test_lowered_budget_total_with_journal_ahead_of_local() -> None:
    # the journal holds more than the (old-total) local file: the journal's spent, new total
    got = _restore(total=5.0, releases=[_release(4, 4.0)],
                   local=LocalState(3, _accountant(10.0, [1.0, 1.0, 1.0])),
                   known=Accountant(5.0))
    assert got.accountant.total == 5.0 and got.accountant.spent == 4.0
    assert got.exhausted is None


# ---- restore: seqs ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("journal", "local", "known", "expected"),
    [
        ([1, 4, 2], 3, 0, 4),  # the journal
        ([1, 2], 7, 0, 7),  # the local file (a drawn seq is never reused)
        ([1, 2], 2, 9, 9),  # the running worker's own high-water mark
        ([], 0, 0, 0),
    ],
)
def test_last_seq_is_the_max(journal: list[int], local: int, known: int, expected: int) -> None:
    releases = [_release(s, 0.5 * s) for s in journal]
    acc = _accountant(10.0, [0.5] * local)
    got = _restore(releases=releases, local=LocalState(local, acc), last_seq=known)
    assert got.last_seq == expected


def test_last_seq_without_local_file() -> None:
    assert _restore(releases=[_release(6, 1.0)], last_seq=2).last_seq == 6
    assert _restore(last_seq=3).last_seq == 3


@pytest.mark.parametrize(
    ("seqs", "local", "expected"),
    [([1, 3, 2], 2, 3), ([1], 5, 5), ([], 4, 4), ([], 0, 0)],
)
def test_last_priors_seq_is_the_max(seqs: list[int], local: int, expected: int) -> None:
    priors = [_priors(s, "a", [1, 0, 0], spent=0.1 * s) for s in seqs]
    got = _restore(priors=priors, local=LocalState(1, _accountant(10.0, [0.5]), None, local))
    assert got.last_priors_seq == expected


def test_priors_of_unknown_groups_still_count_for_seq_and_budget() -> None:
    got = _restore(priors=[_priors(7, "gone", [1, 0, 0], spent=3.5)])
    assert got.last_priors_seq == 7 and got.accountant.spent == 3.5
    assert got.laws == INITIAL and got.priors_seq == 0


def test_restore_applies_the_newest_laws() -> None:
    got = _restore(priors=[_priors(1, "a", [0.5, 0.25, 0.25]), _priors(2, "a", [0.1, 0.1, 0.8]),
                           _priors(1, "b", [0.9, 0.1], support=[0, 2])])
    assert got.priors_seq == 2
    assert got.laws["a"] == Distribution.from_points([0, 1, 2], [0.1, 0.1, 0.8])
    assert got.laws["b"] == Distribution.from_points([0, 2], [0.9, 0.1])


# ---- laws_in_force ---------------------------------------------------------------------------
def test_laws_in_force_nothing_published() -> None:
    laws, round_ = laws_in_force([], INITIAL)
    assert laws == INITIAL and round_ == 0
    assert laws is not INITIAL  # a copy: the caller's initial laws are not modified


def test_laws_in_force_newest_per_group_in_any_order() -> None:
    records = [
        _priors(3, "a", [0.6, 0.2, 0.2]),
        _priors(1, "a", [0.2, 0.2, 0.6]),
        _priors(2, "b", [0.7, 0.3], support=[0, 2]),
        _priors(2, "a", [0.2, 0.6, 0.2]),
        _priors(1, "b", [0.1, 0.9], support=[0, 2]),
    ]
    laws, round_ = laws_in_force(records, INITIAL)
    assert laws["a"] == Distribution.from_points([0, 1, 2], [0.6, 0.2, 0.2])
    assert laws["b"] == Distribution.from_points([0, 2], [0.7, 0.3])
    assert round_ == 3
    assert INITIAL["a"] == A0  # not mutated


def test_laws_in_force_ignores_unknown_groups() -> None:
    records = [_priors(1, "a", [0.5, 0.5, 0.0]), _priors(5, "zz", [1, 0, 0])]
    laws, round_ = laws_in_force(records, INITIAL)
    assert set(laws) == {"a", "b"} and round_ == 1
    assert laws["a"] == Distribution.from_points([0, 1, 2], [0.5, 0.5, 0.0])


def test_laws_in_force_group_never_published_keeps_initial() -> None:
    laws, round_ = laws_in_force([_priors(4, "a", [1, 0, 0])], INITIAL)
    assert laws["a"] == Distribution.from_points([0, 1, 2], [1, 0, 0])
    assert laws["b"] is B0 and round_ == 4


@pytest.mark.parametrize(
    ("up_to", "a_probs", "round_"),
    [
        (None, [0.1, 0.1, 0.8], 3),
        (3, [0.1, 0.1, 0.8], 3),
        (2, [0.3, 0.3, 0.4], 2),
        (1, [0.5, 0.25, 0.25], 1),
        (0, None, 0),
    ],
)
def test_laws_in_force_up_to(up_to: int | None, a_probs: list[float] | None, round_: int) -> None:
    records = [_priors(1, "a", [0.5, 0.25, 0.25]), _priors(2, "a", [0.3, 0.3, 0.4]),
               _priors(3, "a", [0.1, 0.1, 0.8])]
    laws, got_round = laws_in_force(records, INITIAL, up_to=up_to)
    expected = A0 if a_probs is None else Distribution.from_points([0, 1, 2], a_probs)
    assert laws["a"] == expected and got_round == round_
    assert laws["b"] == B0


def test_laws_in_force_round_is_max_seq_used_not_max_seen() -> None:
    # the newest record is for an unknown group, and one is beyond up_to: neither is "used"
    records = [_priors(2, "a", [1, 0, 0]), _priors(6, "zz", [1, 0, 0]),
               _priors(4, "b", [0.5, 0.5], support=[0, 2])]
    _, round_ = laws_in_force(records, INITIAL, up_to=3)
    assert round_ == 2


def test_laws_in_force_skips_a_record_that_is_not_a_law() -> None:
    # probabilities not summing to 1 are no law: the previous law stays in force
    records = [_priors(1, "a", [0.5, 0.25, 0.25]), _priors(2, "a", [0.9, 0.9, 0.9])]
    laws, round_ = laws_in_force(records, INITIAL)
    assert laws["a"] == Distribution.from_points([0, 1, 2], [0.5, 0.25, 0.25])
    assert round_ == 1


# ---- privacy windows -----------------------------------------------------------------------
def _in_window(record: Release | PriorsRecord, window: int) -> Release | PriorsRecord:
    return record.model_copy(update={"window": window})


def test_a_window_restores_only_its_own_charges() -> None:
    releases = [_in_window(_release(1, 3.0), 7), _in_window(_release(2, 4.0), 7),
                _in_window(_release(3, 0.5), 8)]
    priors = [_in_window(_priors(1, "a", [0.2, 0.3, 0.5], spent=4.5), 7),
              _in_window(_priors(2, "a", [0.2, 0.3, 0.5], spent=1.0), 8)]
    now = restore(10.0, releases, priors, None, Accountant(10.0), 0, INITIAL, None, 8)
    assert now.accountant.spent == 1.0  # window 8: the priors round after release 3
    assert now.last_seq == 3 and now.last_priors_seq == 2  # seqs are global
    earlier = restore(10.0, releases, priors, None, Accountant(10.0), 0, INITIAL, None, 7)
    assert earlier.accountant.spent == 4.5
    fresh = restore(10.0, releases, priors, None, Accountant(10.0), 0, INITIAL, None, 9)
    assert fresh.accountant.spent == 0.0 and fresh.exhausted is None


def test_a_window_ignores_the_local_file_of_another_window() -> None:
    local = LocalState(4, _accountant(10.0, [2.0, 2.0]), None, 0, window=7)
    other = restore(10.0, [], [], local, Accountant(10.0), 0, INITIAL, None, 8)
    assert other.accountant.spent == 0.0 and other.last_seq == 4
    same = restore(10.0, [], [], local, Accountant(10.0), 0, INITIAL, None, 7)
    assert same.accountant.spent == 4.0
