"""Which fetched record may be handed over (stream_app/faust_adapter/offsets.py)."""

from __future__ import annotations

from stream_app.faust_adapter.offsets import ExpectedOffsets, Verdict

TP = ("reports", 0)


def test_an_unknown_position_takes_any_record_then_expects_the_next() -> None:
    offsets = ExpectedOffsets()
    stamp = offsets.fetch_stamp()
    assert offsets.judge(TP, 7, stamp) is Verdict.DELIVER
    assert offsets.handed_over(TP, 7) is True
    assert offsets.expected(TP) == 8
    assert offsets.judge(TP, 8, stamp) is Verdict.DELIVER


def test_a_record_before_the_expected_one_is_dropped() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 4)
    stamp = offsets.fetch_stamp()
    assert offsets.judge(TP, 4, stamp) is Verdict.DROP
    assert offsets.judge(TP, 0, stamp) is Verdict.DROP


def test_a_gap_in_a_fetch_begun_after_the_last_seek_is_handed_over_past() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 2)
    stamp = offsets.fetch_stamp()  # the fetch from 3 returns 6 first: 3..5 are not in the log
    assert offsets.judge(TP, 6, stamp) is Verdict.GAP
    assert offsets.skip_gap(TP, 6) == 3
    assert offsets.expected(TP) == 6 and offsets.handed_over(TP, 6) is True
    assert offsets.judge(TP, 9, stamp) is Verdict.GAP  # later in the same batch, or the next


def test_a_gap_right_after_a_seek_is_fetched_once_more_before_it_is_acknowledged() -> None:
    """A seek the client lost (or a fetch in the client's thread that overwrote its position)
    shows as the first record after the seek past its target: fetched from the target once
    more; the same first record again is a gap of the log (run L, tests/README.md)."""
    offsets = ExpectedOffsets()
    offsets.sought(TP, 3)
    assert offsets.judge(TP, 6, offsets.fetch_stamp()) is Verdict.RESEEK
    offsets.sought(TP, 3)  # the loop seeks back to 3
    assert offsets.judge(TP, 6, offsets.fetch_stamp()) is Verdict.GAP  # 3..5 are not there
    assert offsets.skip_gap(TP, 6) == 3 and offsets.handed_over(TP, 6) is True
    # a record that comes from the target the second time is handed over, nothing skipped
    offsets.sought(TP, 10)
    assert offsets.judge(TP, 14, offsets.fetch_stamp()) is Verdict.RESEEK
    offsets.sought(TP, 10)
    assert offsets.judge(TP, 10, offsets.fetch_stamp()) is Verdict.DELIVER
    # another first record past the target after the confirming seek: once more
    assert offsets.handed_over(TP, 10) is True
    offsets.sought(TP, 20)
    assert offsets.judge(TP, 25, offsets.fetch_stamp()) is Verdict.RESEEK
    offsets.sought(TP, 20)
    assert offsets.judge(TP, 23, offsets.fetch_stamp()) is Verdict.RESEEK
    offsets.sought(TP, 20)
    assert offsets.judge(TP, 23, offsets.fetch_stamp()) is Verdict.GAP


def test_a_gap_in_a_fetch_begun_before_a_seek_is_sought_back() -> None:
    offsets = ExpectedOffsets()
    offsets.sought(TP, 8)
    stamp = offsets.fetch_stamp()  # a fetch begins from 8 ...
    offsets.sought(TP, 3)  # ... and a rebalance seeks back to 3 before it returns 8, 9
    assert offsets.judge(TP, 8, stamp) is Verdict.RESEEK
    refetch = offsets.fetch_stamp()  # the loop sought back to 3: the fetch from there decides
    assert offsets.judge(TP, 5, refetch) is Verdict.RESEEK  # once more, then a gap
    offsets.sought(TP, 3)
    assert offsets.judge(TP, 5, offsets.fetch_stamp()) is Verdict.GAP


def test_a_seek_of_another_partition_leaves_a_gap_alone() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 2)
    stamp = offsets.fetch_stamp()
    offsets.sought(("reports", 1), 0)
    assert offsets.judge(TP, 6, stamp) is Verdict.GAP


def test_a_gap_at_an_unknown_position_starts_at_the_record() -> None:
    offsets = ExpectedOffsets()
    assert offsets.skip_gap(TP, 4) == 4 and offsets.expected(TP) == 4


def test_a_seek_during_a_hand_off_wins() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 9)
    assert offsets.judge(TP, 10, offsets.fetch_stamp()) is Verdict.DELIVER
    offsets.sought(TP, 4)  # a rebalance sought back to the committed offset meanwhile
    assert offsets.handed_over(TP, 10) is False
    assert offsets.expected(TP) == 4


def test_a_seek_to_the_very_offset_being_handed_over_still_wins() -> None:
    """The record was thrown away after its hand-off (a flow-control wipe) and sought again:
    the expected offset looks unchanged, but advancing past it would drop the fresh copy."""
    offsets = ExpectedOffsets()
    offsets.sought(TP, 15)
    epoch = offsets.epoch(TP)  # the hand-off of 15 begins
    offsets.sought(TP, 15)  # the wipe's refetch
    assert offsets.handed_over(TP, 15, epoch) is False
    assert offsets.expected(TP) == 15
    assert offsets.judge(TP, 15, offsets.fetch_stamp()) is Verdict.DELIVER
    epoch = offsets.epoch(TP)
    assert offsets.handed_over(TP, 15, epoch) is True and offsets.expected(TP) == 16


def test_a_revoke_during_a_hand_off_makes_it_stale() -> None:
    offsets = ExpectedOffsets()
    offsets.sought(TP, 3)
    epoch = offsets.epoch(TP)
    offsets.forget(TP)
    offsets.sought(TP, 3)  # assigned again, from the committed offset
    assert offsets.handed_over(TP, 3, epoch) is False and offsets.expected(TP) == 3


def test_a_seek_to_an_unknown_position_or_a_revoke_forgets() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 2)
    offsets.sought(TP, None)
    assert offsets.expected(TP) is None
    offsets.handed_over(TP, 5)
    offsets.forget(TP)
    assert offsets.expected(TP) is None
    assert offsets.judge(TP, 0, offsets.fetch_stamp()) is Verdict.DELIVER
    other = ("reports", 1)
    offsets.handed_over(other, 1)
    assert offsets.expected(TP) is None and offsets.expected(other) == 2


def test_a_revoke_makes_a_fetch_begun_before_it_stale() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 2)
    stamp = offsets.fetch_stamp()
    offsets.forget(TP)
    offsets.sought(TP, 3)
    assert offsets.judge(TP, 7, stamp) is Verdict.RESEEK


def test_a_partition_is_stalled_when_the_client_stays_past_the_expected_offset() -> None:
    offsets = ExpectedOffsets()
    offsets.sought(TP, 1)
    assert offsets.stalled(TP, 2) is False  # first sight: maybe a hand-off in progress
    assert offsets.stalled(TP, 2) is True   # still nothing handed over: lost on the way
    assert offsets.stalled(TP, 2) is False  # reported once
    assert offsets.stalled(TP, 1) is False  # the seek back: the client at 1
    assert offsets.stalled(TP, 2) is False  # fetched again to 2 with nothing handed over:
    assert offsets.stalled(TP, 2) is False  # a gap at the end of the log (a marker), left alone
    assert offsets.stalled(TP, 3) is False  # further on: watched afresh
    assert offsets.stalled(TP, 3) is True


def test_a_hand_off_in_progress_restarts_the_stall_watch() -> None:
    offsets = ExpectedOffsets()
    offsets.sought(TP, 1)
    assert offsets.stalled(TP, 2) is False
    offsets.busy()
    assert offsets.stalled(TP, 2) is False  # two idle checks in a row are needed
    assert offsets.stalled(TP, 2) is True


def test_progress_or_a_caught_up_client_is_not_a_stall() -> None:
    offsets = ExpectedOffsets()
    offsets.sought(TP, 1)
    assert offsets.stalled(TP, 5) is False
    assert offsets.handed_over(TP, 1) is True
    assert offsets.stalled(TP, 5) is False  # a record went through since
    assert offsets.stalled(TP, 2) is False  # expected 2, client at 2: caught up
    assert offsets.stalled(TP, 2) is False
    unknown = ("reports", 3)
    assert offsets.stalled(unknown, 9) is False and offsets.stalled(unknown, 9) is False


def test_records_dropped_before_the_loop_saw_them_are_fetched_from_the_expected_offset() -> None:
    offsets = ExpectedOffsets()
    offsets.sought(TP, 0)  # table recovery seeks its changelog to 0
    epoch = offsets.epoch(TP)  # a fetch begun before comes back with 0..8, thrown away
    assert offsets.dropped(TP, 0, epoch) == 0
    offsets.handed_over(TP, 0)
    assert offsets.dropped(TP, 5, epoch) == 1  # 1..4 never reached the loop either


def test_records_dropped_at_an_unknown_position_are_fetched_from_the_first_of_them() -> None:
    offsets = ExpectedOffsets()
    assert offsets.dropped(TP, 3, offsets.epoch(TP)) == 3


def test_a_seek_or_revoke_after_the_fetch_decides_over_dropped_records() -> None:
    offsets = ExpectedOffsets()
    epoch = offsets.epoch(TP)
    offsets.sought(TP, 2)
    assert offsets.dropped(TP, 5, epoch) is None
    epoch = offsets.epoch(TP)
    offsets.forget(TP)
    assert offsets.dropped(TP, 5, epoch) is None


def test_records_are_skipped_while_a_seek_runs_in_the_client_thread() -> None:
    offsets = ExpectedOffsets()
    offsets.handed_over(TP, 4)  # expects 5
    offsets.seek_begins(TP)  # recovery seeks to 0 in the client thread
    stamp = offsets.fetch_stamp()
    assert offsets.judge(TP, 0, stamp) is Verdict.WAIT  # from after the seek? unknown here
    assert offsets.judge(TP, 1, stamp) is Verdict.WAIT
    assert offsets.stalled(TP, 9) is False and offsets.stalled(TP, 9) is False
    assert offsets.seeking(TP)  # none of its records may be kept for later (the gate)
    assert offsets.seek_ended(TP, 0, moved=True) == 0  # fetch again from the seek target
    assert not offsets.seeking(TP)
    assert offsets.expected(TP) == 0 and offsets.judge(TP, 0, stamp) is Verdict.DELIVER


def test_a_seek_in_the_client_thread_with_nothing_skipped_needs_no_second_seek() -> None:
    offsets = ExpectedOffsets()
    offsets.seek_begins(TP)
    assert offsets.seek_ended(TP, 3, moved=True) is None and offsets.expected(TP) == 3
    offsets.handed_over(TP, 3)
    offsets.seek_begins(TP)  # seek_to_committed without a committed offset: not moved
    assert offsets.dropped(TP, 4, offsets.epoch(TP)) is None
    assert offsets.seek_ended(TP, None, moved=False) == 4 and offsets.expected(TP) == 4
