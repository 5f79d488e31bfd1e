"""A batch's outcomes: the input counters, and the dead letters of its refused records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from stream_app.domain.batch import NOT_REFUSED, DeadLetters, Letter, Touched
from stream_app.domain.inputs import tuple_new
from stream_app.domain.rejection import EVENT_KINDS, IGNORE_REASONS, REJECT_REASONS
from stream_app.metrics import Metrics


class Outcomes:
    def __init__(self, metrics: Metrics) -> None:
        self._applied = {k: metrics.events_applied.labels(kind=k) for k in EVENT_KINDS}
        self._rejected = {r: metrics.events_rejected.labels(reason=r) for r in REJECT_REASONS}
        self._ignored = {r: metrics.events_ignored.labels(reason=r) for r in IGNORE_REASONS}

    def rejected(self, reason: str, n: int) -> None:
        self._rejected[reason].inc(n)

    def count(self, events: Sequence[Any], touched: dict[str, Touched],
              reasons: list[str | None], is_report: list[bool],
              details: dict[int, str]) -> DeadLetters:
        """The batch's counters; its dead letters."""
        outcomes: Counter[str] = Counter()
        letters: DeadLetters = []
        if reasons.count(None) == len(reasons):  # nothing refused or held (the common case)
            reports = sum(is_report)
            memberships = len(reasons) - reports
        else:
            reports = memberships = 0
            for i, reason in enumerate(reasons):
                if reason is None:
                    if is_report[i]:
                        reports += 1
                    else:
                        memberships += 1
                    continue
                outcomes[reason] += 1
                if reason not in NOT_REFUSED:
                    msg = events[i].message
                    letters.append(tuple_new(Letter, (
                        msg.topic, msg.value, reason, msg.partition,
                        getattr(msg, "offset", None), details.get(i))))
        for t in touched.values():
            if t.later is not None:
                reports += t.later.applied
                outcomes["late_after_leave"] += t.later.late
                letters.extend(t.later.letters)
                outcomes.update(letter.reason for letter in t.later.letters)
        if reports:
            self._applied["report"].inc(reports)
        if memberships:
            self._applied["membership"].inc(memberships)
        for reason, n in outcomes.items():
            if reason in self._rejected:
                self._rejected[reason].inc(n)
            elif reason in self._ignored:
                self._ignored[reason].inc(n)
        return letters

