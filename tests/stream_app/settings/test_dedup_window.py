"""The default dedup window keeps a full per-user state under 1 KiB, measured on the
stored bytes themselves (what the in-memory store keeps and the changelog carries)."""

from __future__ import annotations

import sys

from stream_app.domain.digests import report_digest
from stream_app.domain.state import UserState
from stream_app.settings import Settings


def test_default_window_state_fits_in_one_kib() -> None:
    window = Settings().dedup_window
    assert window == 64
    state = UserState(
        partition=3, present=True, group="default", value_units=15 * 1024, value_ts=1.7e9,
        counts=tuple(range(1000, 1016)),  # K = 16, 4-digit counts
        recent_ids=tuple(report_digest(f"report-{j:012d}") for j in range(window)),
    )
    stored = state.to_bytes()
    assert sys.getsizeof(stored) + sys.getsizeof("user-00000001") < 1024
    assert UserState.from_stored(stored) == state
