"""stream_app.domain.aggregate: the batch forms equal the one-at-a-time ones
(Draft.contribution, PartitionAggregate.replace) on random drafts and changes, the rare shapes
included."""

from __future__ import annotations

import random

import pytest

from pufferfish_core.learning import SHARES_COUNT_LIMIT
from stream_app.domain.aggregate import Contribution, PartitionAggregate, contributions
from stream_app.domain.draft import Draft


def random_draft(rng: random.Random, k: int) -> Draft:
    d = Draft(partition=0)
    d.exists = True
    d.present = rng.random() < 0.85
    d.group = rng.choice(["g1", "g2", None]) if rng.random() < 0.2 else "g1"
    d.value_units = rng.choice([None, rng.randrange(-5000, 5000)])
    kk = k if rng.random() < 0.95 else k + 1  # an older state's histogram length
    top = rng.choice([0, 1, 3, 1000])
    d.counts = [rng.randrange(top + 1) for _ in range(kk)] if rng.random() < 0.97 else []
    return d


def test_contributions_are_each_drafts_own() -> None:
    rng = random.Random(7)
    for _ in range(300):
        k = rng.choice([1, 2, 5, 16])
        drafts = [random_draft(rng, k) for _ in range(rng.randrange(0, 30))]
        assert contributions(drafts) == [d.contribution() for d in drafts]


def test_counts_too_large_for_int64_fall_back_to_exact_integers() -> None:
    huge = Draft(partition=0)
    huge.exists = huge.present = True
    huge.group, huge.value_units = "g1", 3
    huge.counts = [2**70, 1, SHARES_COUNT_LIMIT]
    small = Draft(partition=0)
    small.exists = small.present = True
    small.group, small.value_units, small.counts = "g1", 1, [1, 2, 3]
    assert contributions([small, huge]) == [small.contribution(), huge.contribution()]


def random_contribution(rng: random.Random, k: int) -> Contribution | None:
    if rng.random() < 0.1:
        return None
    d = random_draft(rng, k)
    return d.contribution()


def test_replace_all_is_replace_one_at_a_time() -> None:
    rng = random.Random(11)
    for _ in range(300):
        k = rng.choice([1, 3, 16])
        changes = []
        for _ in range(rng.randrange(0, 40)):
            new = random_contribution(rng, k) or Contribution(0, None, None)
            changes.append((random_contribution(rng, k), new))
        start = {"g1": [rng.randrange(10**6) for _ in range(k)]} if rng.random() < 0.5 else {}
        one, batch = (PartitionAggregate(partition=0, sum_units=5,
                                         group_units={g: list(v) for g, v in start.items()},
                                         dirty=False) for _ in range(2))
        try:
            for old, new in changes:
                one.replace(old, new)
        except IndexError:  # a share longer than the group's bins: refused either way
            with pytest.raises(IndexError):
                batch.replace_all(changes)
            continue
        batch.replace_all(changes)
        assert (batch.sum_units, batch.group_units) == (one.sum_units, one.group_units)
        assert batch.group_totals == one.group_totals
        assert batch.dirty


def test_a_roll_of_an_acknowledged_state_is_what_a_pending_partition_shows() -> None:
    """Issue 42, point 5: a quiet partition rolled on the clock, then its first record of the
    window made its partial fall back to the window before until the write was acknowledged,
    so the tick's time followed that one user's report. A roll of an acknowledged state is
    acknowledged: the partial shows the new window while the record's write is pending."""
    agg = PartitionAggregate(partition=0, sum_units=5, window=3, previous_units=4)
    agg.durable = agg.tree_state()  # every write acknowledged
    agg.roll(4)
    agg.replace(Contribution(0, None, None), Contribution(2, None, None))  # a join, unacked
    assert agg.partial_fields(pending=True) == dict(window=4, admitted_units=5,
                                                    previous_units=5, sum_units=5)
    assert agg.partial_fields(pending=False)["admitted_units"] == 7


def test_a_roll_over_unacknowledged_changes_keeps_the_acknowledged_state() -> None:
    """A change not acknowledged yet may be taken back by a crash: the rolled state holds it,
    so the partial keeps showing the last acknowledged one (the window before)."""
    agg = PartitionAggregate(partition=0, sum_units=5, window=3, previous_units=4)
    agg.durable = agg.tree_state()
    agg.replace(Contribution(0, None, None), Contribution(2, None, None))  # pending
    agg.roll(4)
    assert agg.partial_fields(pending=True) == dict(window=3, admitted_units=5,
                                                    previous_units=4, sum_units=5)


def test_a_roll_the_worker_knows_settled_is_acknowledged() -> None:
    """The partials timer rolls a partition with no write pending (``settled``): its state is
    acknowledged even if no acknowledgement set ``durable`` yet (a rebuilt partition)."""
    agg = PartitionAggregate(partition=0, sum_units=5)
    assert agg.durable is None
    agg.roll(4, settled=True)
    agg.replace(Contribution(0, None, None), Contribution(2, None, None))  # a join, unacked
    assert agg.partial_fields(pending=True) == dict(window=4, admitted_units=5,
                                                    previous_units=5, sum_units=5)


def members_by_hand(drafts: list[Draft]) -> dict[str, list[int]]:
    """Each group's [sum of its present members' values (0 before a report), their number],
    read off the users' final states (only groups that ever had a member appear)."""
    out: dict[str, list[int]] = {}
    for d in drafts:
        if d.present and d.group is not None:
            held = out.setdefault(d.group, [0, 0])
            held[0] += d.value_units or 0
            held[1] += 1
    return out


def member_draft(rng: random.Random, k: int) -> Draft:
    """``random_draft`` with one histogram length (the shapes a group's bins refuse aside)."""
    d = random_draft(rng, k)
    d.counts = (d.counts + [0] * k)[:k]
    return d


def test_group_totals_are_each_groups_present_members_after_any_history() -> None:
    """Users join, leave, change group and value at random, their changes applied one at a
    time, in batches, and rebuilt at the end: every form gives the totals read off the final
    states, and with every present user in a group the groups' sums are the partition's."""
    rng = random.Random(23)
    for _ in range(100):
        users = [member_draft(rng, 3) for _ in range(rng.randrange(1, 12))]
        one, batch = PartitionAggregate(partition=0), PartitionAggregate(partition=0)
        for agg in (one, batch):
            agg.add_all([d.contribution() for d in users])
        for _ in range(rng.randrange(0, 30)):
            changes = []
            for _ in range(rng.randrange(1, 5)):
                i = rng.randrange(len(users))
                old = users[i].contribution()
                users[i] = member_draft(rng, 3)
                changes.append((old, users[i].contribution()))
            for old, new in changes:
                one.replace(old, new)
            batch.replace_all(changes)
        rebuilt = PartitionAggregate(partition=0)
        rebuilt.add_all(contributions(users))
        expected = members_by_hand(users)
        for agg in (one, batch, rebuilt):
            got = {g: v for g, v in agg.group_totals.items() if v != [0, 0]}
            assert got == {g: v for g, v in expected.items() if v != [0, 0]}
        if all(d.group is not None for d in users if d.present):
            assert sum(v[0] for v in rebuilt.group_totals.values()) == rebuilt.sum_units
