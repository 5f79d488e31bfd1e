"""Per-user event rules and partition aggregates (no broker)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from stream_app.models import Membership, Rejected, Report
from stream_app.state import (
    EventRules,
    PartitionAggregate,
    UserState,
    apply_membership,
    apply_report,
)

DOMAIN = (0.0, 0.5, 1.0, 2.0)


def rules(**kw: object) -> EventRules:
    base: dict[str, object] = dict(
        domain=DOMAIN, grid_log2=-1, dedup_window=3, auto_join=False,
        known_groups=frozenset({"g1", "g2", "d"}), default_group="d",
    )
    base.update(kw)
    return EventRules(**base)  # type: ignore[arg-type]


def rep(uid: str, value: float, rid: str, ts: float = 1.0) -> Report:
    return Report(user_id=uid, value=value, report_id=rid, ts=ts)


def mem(uid: str, event: str, group: str | None = None, ts: float = 1.0) -> Membership:
    return Membership(user_id=uid, event=event, group=group, ts=ts)  # type: ignore[arg-type]


def reason_of(fn, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(Rejected) as info:
        fn(*args)
    return info.value.reason


def test_join_report_leave_cycle() -> None:
    r = rules()
    s = apply_membership(None, mem("u", "join", "g1"), 2, r)
    assert (s.present, s.group, s.partition, s.contribution_units) == (True, "g1", 2, 0)
    s = apply_report(s, rep("u", 0.5, "a", ts=5), 2, r)
    assert s.value_units == 1 and s.counts == (0, 1, 0, 0) and s.contribution_units == 1
    s = apply_report(s, rep("u", 2.0, "b", ts=6), 2, r)
    assert s.value_units == 4 and s.counts == (0, 1, 0, 1)
    # an older report (by ts) is counted in the histogram but does not replace the value
    s = apply_report(s, rep("u", 1.0, "c", ts=3), 2, r)
    assert s.value_units == 4 and s.counts == (0, 1, 1, 1)
    s = apply_membership(s, mem("u", "leave"), 2, r)
    assert not s.present and s.contribution_units == 0 and s.counts == (0, 1, 1, 1)
    s = apply_membership(s, mem("u", "join"), 2, r)  # rejoin keeps the group and history
    assert s.present and s.group == "g1" and s.contribution_units == 4


def test_rejections() -> None:
    r = rules()
    joined = apply_membership(None, mem("u", "join"), 0, r)
    assert reason_of(apply_report, None, rep("u", 1.0, "a"), 0, r) == "not_present"
    assert reason_of(apply_report, joined, rep("u", 0.25, "a"), 0, r) == "out_of_domain"
    assert reason_of(apply_report, joined, rep("u", 3.0, "a"), 0, r) == "out_of_domain"
    assert reason_of(apply_membership, joined, mem("u", "join"), 0, r) == "already_present"
    assert reason_of(apply_membership, None, mem("u", "leave"), 0, r) == "unknown_user"
    left = apply_membership(joined, mem("u", "leave"), 0, r)
    assert reason_of(apply_membership, left, mem("u", "leave"), 0, r) == "unknown_user"
    g = rules(known_groups=frozenset({"a"}), default_group=None)
    assert reason_of(apply_membership, None, mem("u", "join", "b"), 0, g) == "unknown_group"
    assert reason_of(apply_membership, None, mem("u", "join"), 0, g) == "unknown_group"
    assert apply_membership(None, mem("u", "join", "a"), 0, g).group == "a"
    assert reason_of(apply_report, None, rep("u", 1.0, "a"), 0, rules(
        auto_join=True, default_group=None)) == "unknown_group"


def test_a_join_without_group_goes_to_the_default_group() -> None:
    assert apply_membership(None, mem("u", "join"), 0, rules()).group == "d"


def test_auto_join() -> None:
    s = apply_report(None, rep("u", 1.0, "a"), 1, rules(auto_join=True))
    assert s.present and s.value_units == 2 and s.partition == 1 and s.group == "d"


def test_dedup_window_is_bounded() -> None:
    r = rules(dedup_window=3)
    s = apply_membership(None, mem("u", "join"), 0, r)
    for rid in "abcd":
        s = apply_report(s, rep("u", 1.0, rid), 0, r)
    assert s.recent_ids == ("b", "c", "d")
    assert reason_of(apply_report, s, rep("u", 1.0, "d"), 0, r) == "duplicate_report"
    assert reason_of(apply_report, s, rep("u", 1.0, "b"), 0, r) == "duplicate_report"
    # beyond the documented window an id is no longer remembered
    s2 = apply_report(s, rep("u", 1.0, "a"), 0, r)
    assert s2.counts[2] == 5


def test_state_json_round_trip() -> None:
    s = UserState(partition=3, present=True, group="g", value_units=7, value_ts=2.5,
                  counts=(1, 2), recent_ids=("x",))
    assert UserState.from_json(s.to_json()) == s


def test_partition_aggregate_incremental_equals_recompute() -> None:
    rng = random.Random(3)
    r = rules(auto_join=False, dedup_window=1000)
    agg = PartitionAggregate(partition=0)
    users: dict[str, UserState] = {}
    for i in range(2000):
        uid = f"u{rng.randrange(30)}"
        old = users.get(uid)
        try:
            if rng.random() < 0.3:
                ev = "leave" if old is not None and old.present else "join"
                new = apply_membership(old, mem(uid, ev, rng.choice(["g1", "g2"])), 0, r)
            else:
                new = apply_report(old, rep(uid, rng.choice(DOMAIN), f"r{i}", ts=i), 0, r)
        except Rejected:
            continue
        agg.apply(old, new)
        users[uid] = new
        exact_sum = sum(s.value_units for s in users.values()
                        if s.present and s.value_units is not None)
        assert agg.sum_units == exact_sum
        assert _nonzero(agg.group_units) == _group_shares(users)
    elsewhere = ("other", UserState(partition=1, present=True, group="g1", value_units=99,
                                    counts=(1, 0, 0, 0)))
    rebuilt = PartitionAggregate.rebuild(0, [*users.items(), elsewhere])
    assert rebuilt.sum_units == agg.sum_units
    assert _nonzero(rebuilt.group_units) == _nonzero(agg.group_units)


def _nonzero(groups: dict[str, list[int]]) -> dict[str, list[int]]:
    return {g: v for g, v in groups.items() if any(v)}


def _group_shares(users: dict[str, UserState]) -> dict[str, list[int]]:
    """Per group, the sum over present members with reports of counts * 2**16 / total, rounded
    so each member's share sums to 2**16 (largest remainder) -- computed here from scratch."""
    out: dict[str, list[int]] = {}
    for st in users.values():
        total = sum(st.counts)
        if not st.present or total == 0 or st.group is None:
            continue
        exact = [Fraction(c * 65536, total) for c in st.counts]
        share = [int(x) for x in exact]
        order = sorted(range(len(share)), key=lambda j: (-(exact[j] - share[j]), j))
        for j in order[: 65536 - sum(share)]:
            share[j] += 1
        acc = out.setdefault(st.group, [0] * len(share))
        for j, units in enumerate(share):
            acc[j] += units
    return out


def test_state_json_has_every_field() -> None:
    from dataclasses import fields

    assert set(UserState(partition=0).to_json()) == {f.name for f in fields(UserState)}
