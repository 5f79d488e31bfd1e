"""``pufferfish send`` stamps records (stream_app/tools/user_order.py) so that the worker's
timestamp merge of the two input topics (docs/design.md, "The gate": membership first at equal
timestamps) keeps the file's order: a membership record never shares the millisecond of a
report sent before it."""

from __future__ import annotations

from typing import Any

import pytest

from stream_app.settings import Settings
from stream_app.tools import user_order


def stamps(monkeypatch: pytest.MonkeyPatch, settings: Settings,
           steps: list[tuple[str, int]]) -> list[int]:
    order = user_order.UserOrder(settings, 1.0)
    out = []
    for topic, now_ms in steps:
        clock: Any = lambda now_ms=now_ms: now_ms * 1_000_000  # noqa: E731
        monkeypatch.setattr(user_order.time, "time_ns", clock)
        out.append(order.stamp(topic))
    return out


def test_a_membership_record_after_a_report_is_stamped_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Settings()
    r, m = s.topic_reports, s.topic_membership
    assert r != m
    steps = [(m, 1_000), (r, 1_000), (r, 1_000), (m, 1_000), (m, 1_000), (r, 1_000),
             (m, 1_005), (r, 990), (m, 990)]  # the clock steps back at the end
    assert stamps(monkeypatch, s, steps) == [1_000, 1_000, 1_000, 1_001, 1_001, 1_001,
                                             1_005, 1_005, 1_006]


def test_one_topic_keeps_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings(topic_membership="reports")
    steps = [("reports", 1_000)] * 3 + [("reports", 1_002)]
    assert stamps(monkeypatch, s, steps) == [1_000, 1_000, 1_000, 1_002]
