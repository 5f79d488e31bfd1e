"""The demo's simulated population: users who join, report rows of a column, leave, rejoin."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DOMAIN = tuple(float(v) for v in range(1, 17))  # adult education-num: 1..16

# Churn of the rolling population. A user's reports wait SETTLE_SECONDS after its join, and its
# leave SETTLE_SECONDS after its last report: membership and reports are different topics, so
# the worker may see them in either order within a short window.
LEAVE_PROBABILITY = 0.02
SETTLE_SECONDS = 3.0
REJOIN_AFTER_SECONDS = (2.0, 10.0)


@dataclass(frozen=True)
class Event:
    kind: str  # "report" | "join" | "leave"
    user_id: str
    value: int | None = None
    report_id: str | None = None
    group: str | None = None  # a join's group (None: the worker's default group)

    def payload(self, ts: float) -> dict[str, Any]:
        if self.kind == "report":
            return {"user_id": self.user_id, "value": self.value, "report_id": self.report_id,
                    "ts": ts}
        if self.group is not None:
            return {"user_id": self.user_id, "event": self.kind, "group": self.group, "ts": ts}
        return {"user_id": self.user_id, "event": self.kind, "ts": ts}


class Population:
    """Users who join, report the data set's values in row order, leave and rejoin.

    Row k of the data set becomes one report by one eligible (present, settled, not leaving)
    user. Times are passed in, so the schedule is testable without waiting.
    """

    def __init__(self, users: Sequence[str], values: np.ndarray, seed: int = 0,
                 groups: Sequence[str] = ()) -> None:
        """``groups``: user i joins groups[i % len(groups)] (none: the default group)."""
        if not users or len(values) == 0:
            raise ValueError("need at least one user and one value")
        self.users = list(users)
        self.group_of = {u: groups[i % len(groups)] for i, u in enumerate(users)} if groups \
            else {}
        self.values = values
        self.row = 0
        self.reports = 0
        self.rng = np.random.default_rng(seed)
        self.present: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.leaving: set[str] = set()
        self._due: list[tuple[float, int, str, str]] = []  # heap: (time, tiebreak, kind, user)
        self._tiebreak = 0

    def initial_joins(self, now: float) -> list[Event]:
        """Everybody joins once at the start (before any report)."""
        events = []
        for user in self.users:
            if user not in self.present:
                events.append(self._apply(Event("join", user, group=self.group_of.get(user)),
                                          now))
        return events

    def next_event(self, now: float) -> Event | None:
        """The next event at time `now`, or None if no user can report right now."""
        if self._due and self._due[0][0] <= now:
            _, _, kind, user_id = heapq.heappop(self._due)
            group = self.group_of.get(user_id) if kind == "join" else None
            return self._apply(Event(kind, user_id, group=group), now)
        user = self._pick(now)
        if user is None:
            return None
        value = int(self.values[self.row % len(self.values)])
        self.row += 1
        self.reports += 1
        event = Event("report", user, value=value, report_id=f"r{self.reports}")
        if self.rng.random() < LEAVE_PROBABILITY:
            self.leaving.add(user)
            self._schedule(now + SETTLE_SECONDS, "leave", user)
        return event

    def _pick(self, now: float, tries: int = 32) -> str | None:
        for _ in range(tries):
            user = self.users[int(self.rng.integers(len(self.users)))]
            if user in self.present and user not in self.leaving and self.ready_at[user] <= now:
                return user
        return None

    def _apply(self, event: Event, now: float) -> Event:
        if event.kind == "join":
            self.present.add(event.user_id)
            self.ready_at[event.user_id] = now + SETTLE_SECONDS
        else:
            self.present.discard(event.user_id)
            self.leaving.discard(event.user_id)
            low, high = REJOIN_AFTER_SECONDS
            self._schedule(now + float(self.rng.uniform(low, high)), "join", event.user_id)
        return event

    def _schedule(self, at: float, kind: str, user: str) -> None:
        self._tiebreak += 1
        heapq.heappush(self._due, (at, self._tiebreak, kind, user))
