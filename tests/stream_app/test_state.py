"""Per-user event rules, the lazy-deletion max heap and partition aggregates (no broker)."""

from __future__ import annotations

import random

import pytest

from stream_app.models import Membership, Rejected, Report
from stream_app.state import (
    MaxTracker,
    PartitionAggregate,
    Rules,
    UserState,
    apply_membership,
    apply_report,
    recalibrated,
)

DOMAIN = (0.0, 0.5, 1.0, 2.0)


def rules(**kw: object) -> Rules:
    base: dict[str, object] = dict(
        domain=DOMAIN, grid_log2=-1, dedup_window=3, auto_join=False, known_groups=None,
        group_required=False,
    )
    base.update(kw)
    return Rules(**base)  # type: ignore[arg-type]


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
    g = rules(known_groups=frozenset({"a"}), group_required=True)
    assert reason_of(apply_membership, None, mem("u", "join", "b"), 0, g) == "unknown_group"
    assert reason_of(apply_membership, None, mem("u", "join"), 0, g) == "unknown_group"
    assert apply_membership(None, mem("u", "join", "a"), 0, g).group == "a"


def test_auto_join() -> None:
    s = apply_report(None, rep("u", 1.0, "a"), 1, rules(auto_join=True))
    assert s.present and s.value_units == 2 and s.partition == 1


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
                  counts=(1, 2), recent_ids=("x",), theta=1.5, spread=2.0, binding_pair="p")
    assert UserState.from_json(s.to_json()) == s


def test_recalibrated_uses_the_injected_calibrator() -> None:
    s = UserState(partition=0, present=True)
    out = recalibrated(s, lambda st: (2.5, 3.0, "value_presence"))
    assert (out.theta, out.spread, out.binding_pair) == (2.5, 3.0, "value_presence")


def test_max_tracker_matches_brute_force() -> None:
    rng = random.Random(7)
    tracker = MaxTracker()
    truth: dict[str, float] = {}
    for step in range(5000):
        key = f"k{rng.randrange(50)}"
        if rng.random() < 0.1:
            tracker.discard(key)
            truth.pop(key, None)
        else:
            value = rng.choice([0.0, rng.random() * 10])
            tracker.update(key, value, payload=step)
            truth[key] = value
        top = tracker.top()
        if not truth:
            assert top is None
        else:
            assert top is not None and top[0] == max(truth.values())
            assert truth[top[1]] == top[0]
    assert len(tracker._heap) <= 2 * len(truth) + 65  # stale entries are compacted


def test_partition_aggregate_incremental_equals_recompute() -> None:
    rng = random.Random(3)
    r = rules(auto_join=False, dedup_window=1000)
    agg = PartitionAggregate(partition=0)
    users: dict[str, UserState] = {}

    def calib(st: UserState) -> tuple[float, float, str | None]:  # a stand-in for core
        return float(sum(st.counts)) + (1.0 if st.present else 0.0), float(max(st.counts)), "x"

    for i in range(2000):
        uid = f"u{rng.randrange(30)}"
        old = users.get(uid)
        try:
            if rng.random() < 0.3:
                ev = "leave" if old is not None and old.present else "join"
                new = apply_membership(old, mem(uid, ev), 0, r)
            else:
                new = apply_report(old, rep(uid, rng.choice(DOMAIN), f"r{i}", ts=i), 0, r)
        except Rejected:
            continue
        new = recalibrated(new, calib)
        agg.apply(uid, old, new)
        users[uid] = new
        exact_sum = sum(int(s.value_units * 1) for s in users.values()
                        if s.present and s.value_units is not None)
        assert agg.sum_units == exact_sum
        assert agg.theta == max(s.theta for s in users.values())
        assert agg.spread == max(s.spread for s in users.values())
    elsewhere = ("other", UserState(partition=1, present=True, value_units=99, theta=1e9))
    rebuilt = PartitionAggregate.rebuild(0, [*users.items(), elsewhere])
    assert (rebuilt.sum_units, rebuilt.theta, rebuilt.spread) == (
        agg.sum_units, agg.theta, agg.spread,
    )


def test_state_json_has_every_field() -> None:
    from dataclasses import fields

    assert set(UserState(partition=0).to_json()) == {f.name for f in fields(UserState)}
