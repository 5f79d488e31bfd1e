"""Which partial collect keeps when the partials topic is read again (release/partials_log.py)."""

from __future__ import annotations

import pytest

from stream_app.release.partials_log import supersedes


def test_a_later_offset_replaces_the_held_partial() -> None:
    assert supersedes(held=7, offset=8, log_end=20)
    assert supersedes(held=7, offset=19, log_end=None)


@pytest.mark.parametrize("offset", [0, 3, 7])
def test_a_record_read_again_does_not_replace_a_newer_one(offset: int) -> None:
    # the committed offset lagged (a rebalance, failed commits): offsets up to the held one
    # come again while the log still holds everything up to 20
    assert not supersedes(held=7, offset=offset, log_end=20)
    assert not supersedes(held=7, offset=offset, log_end=8)  # the held record is the newest


def test_an_unknown_end_is_taken_as_a_log_not_reset() -> None:
    assert not supersedes(held=7, offset=2, log_end=None)


@pytest.mark.parametrize("log_end", [0, 3, 7])
def test_a_log_that_ends_at_or_before_the_held_offset_was_reset(log_end: int) -> None:
    # a memory broker that came back empty: offsets start again from 0
    assert supersedes(held=7, offset=0, log_end=log_end)


def test_nothing_held_or_held_without_an_offset() -> None:
    assert supersedes(held=None, offset=0, log_end=None)
    assert supersedes(held=None, offset=5, log_end=3)
