"""Per-user event rules and partition aggregates (no broker)."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

from pufferfish_core.learning import SHARE_UNITS, user_share
from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.digests import digest_bytes, report_digest
from stream_app.domain.draft import Draft
from stream_app.domain.models import Membership, Report
from stream_app.domain.rejection import Rejected
from stream_app.domain.rules import EventRules
from stream_app.domain.state import UserState, apply_membership, apply_report

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
    assert s.recent_ids == tuple(report_digest(r) for r in "bcd")
    assert reason_of(apply_report, s, rep("u", 1.0, "d"), 0, r) == "duplicate_report"
    assert reason_of(apply_report, s, rep("u", 1.0, "b"), 0, r) == "duplicate_report"
    # beyond the documented window an id is no longer remembered
    s2 = apply_report(s, rep("u", 1.0, "a"), 0, r)
    assert s2.counts[2] == 5


def test_state_json_round_trip() -> None:
    s = UserState(partition=3, present=True, group="g", value_units=7, value_ts=2.5,
                  counts=(1, 2), recent_ids=(report_digest("x"), 0, 2**64 - 1))
    assert UserState.from_json(s.to_json()) == s
    assert UserState.from_stored(s.to_bytes()) == s
    assert UserState.from_stored(s.to_json()) == s


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

    # recent_ids (the digests) is stored as one base64 string "ids"; the optional fields
    # (left_ts, held, offsets as "o", admitted as "a") only when set, and then they round-trip
    names = {f.name for f in fields(UserState)} - {"recent_ids", "offsets", "admitted"} \
        | {"ids", "o", "a"}
    full = UserState(partition=0, left_ts=5.0, held=((1.0, 4.0, "r1", 0, 17, 99.0),),
                     offsets=(0, 17, 3), admitted=(7, 2048, 1))
    assert set(full.to_json()) == names
    assert set(UserState(partition=0).to_json()) == names - {"left_ts", "held", "o", "a"}
    assert UserState.from_stored(full.to_bytes()) == full
    assert Draft.decode(full.to_bytes(), 0).to_bytes() == full.to_bytes()


def test_state_written_by_an_older_version_is_read() -> None:
    """Before 64-bit digests the state kept the report-id strings (``recent_ids``)."""
    old = {"partition": 1, "present": True, "group": "g", "value_units": 4, "value_ts": 2.0,
           "counts": [0, 1, 0, 1], "recent_ids": ["a", "b"]}
    s = UserState.from_stored(json.dumps(old).encode())
    assert s.recent_ids == (report_digest("a"), report_digest("b"))
    r = rules(dedup_window=3)
    assert reason_of(apply_report, s, rep("u", 1.0, "b"), 1, r) == "duplicate_report"
    s = apply_report(s, rep("u", 1.0, "c"), 1, r)
    assert "recent_ids" not in s.to_json() and UserState.from_stored(s.to_bytes()) == s


def test_state_with_a_value_beyond_64_bits_round_trips() -> None:
    s = UserState(partition=0, present=True, group="g", value_units=2**70, counts=(1,))
    assert UserState.from_stored(s.to_bytes()) == s


def test_report_digest_is_stable_and_64_bits() -> None:
    # a stored state must be read identically by every process and version
    assert report_digest("r1") == report_digest("r1") != report_digest("r2")
    assert 0 <= report_digest("\udcff") < 2**64
    assert report_digest("abc") == 0x5995d533d814bbd8


def test_stored_values_do_not_keep_orjson_buffers() -> None:
    """orjson's bytes keep their 4 KiB output buffer in RSS: the stored value must be a
    right-sized copy (bench/memory.py: ~0.5 KiB per user at 16 reports)."""
    import gc
    import os

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    n = 20000
    gc.collect()
    before = rss()
    kept = [UserState(partition=0, present=True, group="g", value_units=i, value_ts=1.0,
                      counts=(1,) * 16, recent_ids=tuple(range(16))).to_bytes()
            for i in range(n)]
    gc.collect()
    assert (rss() - before) / n < 1500, "stored values keep more than their bytes"
    assert len(kept) == n


# --- Draft: the batch path's working copy ---------------------------------------------------
def test_draft_reads_and_writes_the_stored_bytes_unchanged() -> None:
    s = UserState(partition=3, present=True, group="g", value_units=7, value_ts=2.5,
                  counts=(1, 2), recent_ids=(report_digest("x"), 0, 2**64 - 1))
    assert Draft.decode(s.to_bytes(), 0).to_bytes() == s.to_bytes()
    assert Draft.decode(s.to_json(), 0).to_bytes() == s.to_bytes()  # an older dict value
    assert UserState.of(Draft.decode(s.to_bytes(), 0)) == s
    # what the one-record path writes back (orjson reads an int beyond 64 bits as a float)
    big = UserState(partition=0, present=True, group="g", value_units=2**70, counts=(1,))
    again = UserState.from_stored(big.to_bytes()).to_bytes()
    assert Draft.decode(big.to_bytes(), 0).to_bytes() == again


def test_draft_applies_records_in_order_like_the_one_record_rules() -> None:
    r = rules(dedup_window=3)
    draft = Draft(partition=1)
    draft.membership(mem("u", "join", "g1"), 1, r)
    for rid, value, ts in (("a", 0.5, 5.0), ("b", 2.0, 6.0), ("c", 1.0, 3.0), ("d", 0.0, 7.0)):
        draft.report(rep("u", value, rid, ts), 1, r)
    s = UserState.of(draft)
    assert (s.present, s.group, s.partition) == (True, "g1", 1)
    assert s.counts == (1, 1, 1, 1) and s.value_units == 0 and s.value_ts == 7.0
    assert s.recent_ids == tuple(report_digest(x) for x in "bcd")  # the window's last 3
    assert json.loads(draft.to_bytes()) == s.to_json()


def test_a_rejected_record_leaves_the_draft_unchanged() -> None:
    r = rules(dedup_window=3)
    joined = apply_report(apply_membership(None, mem("u", "join"), 0, r), rep("u", 1.0, "a"), 0, r)
    draft = Draft.decode(joined.to_bytes(), 0)
    before = draft.to_bytes()
    for record, why in ((rep("u", 1.0, "a"), "duplicate_report"),
                        (rep("u", 0.25, "b"), "out_of_domain"),
                        (mem("u", "join"), "already_present")):
        with pytest.raises(Rejected) as info:
            if isinstance(record, Report):
                draft.report(record, 2, r)
            else:
                draft.membership(record, 2, r)
        assert info.value.reason == why
        assert draft.to_bytes() == before


def test_duplicates_match_whole_digests_only() -> None:
    """The digests are searched in their packed bytes: a match across two digests is not one."""
    d = digest_bytes("x")
    assert int.from_bytes(d, "little") == report_digest("x")
    pad = b"\x00" * 4
    straddling = (int.from_bytes(pad + d[:4], "little"), int.from_bytes(d[4:] + pad, "little"))
    r = rules(dedup_window=8)
    s = UserState(partition=0, present=True, group="d", counts=(0, 0, 0, 0),
                  recent_ids=straddling)
    assert apply_report(s, rep("u", 1.0, "x"), 0, r).counts == (0, 0, 1, 0)
    draft = Draft.decode(s.to_bytes(), 0)
    draft.report(rep("u", 1.0, "x"), 0, r)  # accepted: the bytes of x sit across two ids
    aligned = UserState(partition=0, present=True, group="d", counts=(0, 0, 0, 0),
                        recent_ids=(*straddling, report_digest("x")))
    assert reason_of(apply_report, aligned, rep("u", 1.0, "x"), 0, r) == "duplicate_report"


def test_stored_ids_must_be_whole_digests() -> None:
    doc = UserState(partition=0, recent_ids=(1, 2)).to_json()
    doc["ids"] = "AAAAAAAAAAAA"  # 9 bytes
    with pytest.raises(ValueError):
        Draft.decode(doc, 0)


def test_aggregate_replace_moves_a_share_between_groups() -> None:
    """Expected shares computed here (``_group_shares``), not by the code under test."""
    a = UserState(partition=0, present=True, group="g1", value_units=3, counts=(1, 2, 0, 0))
    b = UserState(partition=0, present=True, group="g2", value_units=5, counts=(1, 2, 0, 1))
    agg = PartitionAggregate(partition=0)
    agg.apply(None, a)
    assert agg.group_units == _group_shares({"u": a}) and agg.sum_units == 3
    agg.replace(a.contribution(), b.contribution())
    assert _nonzero(agg.group_units) == _group_shares({"u": b}) and agg.sum_units == 5
    c = UserState(partition=0, present=True, group="g2", value_units=1, counts=(3, 3, 1, 1))
    agg.apply(b, c)  # same group: the one-pass update
    assert _nonzero(agg.group_units) == _group_shares({"u": c}) and agg.sum_units == 1
    agg.apply(c, UserState(partition=0, present=False, group="g2", counts=(3, 3, 1, 1)))
    assert _nonzero(agg.group_units) == {} and agg.sum_units == 0


@pytest.mark.parametrize("k", [1, 2, 3, 4, 16, 64])
def test_user_share_is_the_largest_remainder_rounding(k: int) -> None:
    """core.learning.user_share (the one share function; its rounding is written for speed)
    against the rounding written out here: floors, then one unit to each of the largest
    remainders, equal remainders in index order (ties included)."""
    rng = random.Random(k)
    cases = [[0] * k, [1] * k, [7] * k, list(range(k)), list(range(k, 0, -1))]
    for _ in range(3000):
        top = rng.choice([1, 2, 3, 10, 1000, 2**20])
        cases.append([rng.randrange(top + 1) if rng.random() < 0.8 else 0 for _ in range(k)])
    for counts in cases:
        assert user_share(counts) == reference_share(counts), counts
        assert user_share(tuple(counts)) == reference_share(counts), counts


def reference_share(counts: list[int]) -> tuple[int, ...]:
    total = sum(counts)
    if total <= 0:
        return (0,) * len(counts)
    floors = [c * SHARE_UNITS // total for c in counts]
    remainders = [c * SHARE_UNITS % total for c in counts]
    by_remainder = sorted(range(len(counts)), key=lambda j: (-remainders[j], j))
    for j in by_remainder[:SHARE_UNITS - sum(floors)]:
        floors[j] += 1
    return tuple(floors)
