"""stream_app/faust_adapter/write_window: the writes of the batches of one flush window.

The worker with a window (one changelog record per user and window, offsets committed after
it, an idle window flushed by its timer, a SIGKILL that loses a window) is
tests/reliability/test_write_window.py.
"""

from __future__ import annotations

from stream_app.domain.batch import Letter
from stream_app.faust_adapter.write_window import WriteWindow


def letter(n: int) -> Letter:
    return Letter("reports", b"raw-%d" % n, "malformed_json", 0, n, "")


def test_a_new_window_is_empty_and_never_due() -> None:
    window = WriteWindow()
    assert not window
    assert not window.due(1e9, 0.0)


def test_each_user_keeps_its_last_value_per_partition() -> None:
    window = WriteWindow()
    window.add([], [("a", b"a1", 0), ("b", b"b1", 1)], ["e1", "e2"], 10.0)
    window.add([], [("a", b"a2", 0), ("a", b"a3", 2)], ["e3"], 10.2)
    window.add([], [("a", b"a4", 0)], [], 10.3)
    assert window.values == {("a", 0): b"a4", ("b", 1): b"b1", ("a", 2): b"a3"}
    assert window.events == ["e1", "e2", "e3"]


def test_dead_letters_keep_their_order_across_batches() -> None:
    window = WriteWindow()
    window.add([letter(1), letter(2)], [], ["e1"], 5.0)
    window.add([letter(3)], [], ["e2"], 5.1)
    assert [x.offset for x in window.letters] == [1, 2, 3]


def test_due_counts_from_the_first_batch() -> None:
    window = WriteWindow()
    window.add([], [("a", b"a1", 0)], ["e1"], 100.0)
    window.add([], [("a", b"a2", 0)], ["e2"], 100.4)  # a later batch does not reopen it
    assert window
    assert not window.due(100.49, 0.5)
    assert window.due(100.5, 0.5)


def test_flush_seconds_zero_makes_every_batch_due() -> None:
    window = WriteWindow()
    window.add([], [], ["e1"], 7.0)  # a batch with no write (all dead letters elsewhere)
    assert window and window.due(7.0, 0.0)


def test_a_timer_write_without_events_opens_a_window() -> None:
    window = WriteWindow()
    window.add([letter(9)], [("u", b"v", 3)], (), 1.0)  # held reports expired
    assert window and window.events == [] and window.values == {("u", 3): b"v"}
