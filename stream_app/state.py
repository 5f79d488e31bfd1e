"""Per-user state, the event rules that update it, and per-partition aggregates.

Everything here is synchronous and broker-free: the Faust agent (stream_app.app) only moves
bytes in and out. The maths (a user's theta_i) is injected as a ``Calibrate`` callable that
wraps core.user_theta (stream_app.calibration); nothing here computes privacy quantities.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from stream_app.models import Membership, Rejected, Report


@dataclass(frozen=True)
class UserState:
    """One user's state (stored as JSON in a changelog-backed table keyed by user_id).

    ``value_units`` is the latest value in grid units (value / 2**grid_log2, an exact int).
    ``counts[j]`` counts the user's accepted reports equal to ``domain[j]`` (the estimate P_i).
    ``recent_ids`` holds at most ``dedup_window`` report ids, oldest first.
    ``partition`` is the input partition the user's events arrive on (key = user_id).
    """

    partition: int
    present: bool = False
    group: str | None = None
    value_units: int | None = None
    value_ts: float | None = None
    counts: tuple[int, ...] = ()
    recent_ids: tuple[str, ...] = ()
    theta: float = 0.0
    spread: float = 0.0
    binding_pair: str | None = None

    @property
    def contribution_units(self) -> int:
        """What the user adds to X = sum over present users of their current value."""
        return self.value_units if self.present and self.value_units is not None else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition, "present": self.present, "group": self.group,
            "value_units": self.value_units, "value_ts": self.value_ts,
            "counts": list(self.counts), "recent_ids": list(self.recent_ids),
            "theta": self.theta, "spread": self.spread, "binding_pair": self.binding_pair,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UserState:
        return cls(
            partition=int(d["partition"]),
            present=bool(d["present"]),
            group=d.get("group"),
            value_units=d.get("value_units"),
            value_ts=d.get("value_ts"),
            counts=tuple(int(c) for c in d.get("counts", ())),
            recent_ids=tuple(d.get("recent_ids", ())),
            theta=float(d.get("theta", 0.0)),
            spread=float(d.get("spread", 0.0)),
            binding_pair=d.get("binding_pair"),
        )


# Calibrate(state) -> (theta_i, spread_i, binding_pair_i) for the state's present/group/counts.
Calibrate = Callable[[UserState], tuple[float, float, str | None]]


@dataclass(frozen=True)
class Rules:
    """What the event rules need from the settings."""

    domain: tuple[float, ...]
    grid_log2: int
    dedup_window: int
    auto_join: bool
    known_groups: frozenset[str] | None  # None: any group name is accepted
    group_required: bool  # prior_source=declared: a join must name a known group

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {float(v): j for j, v in enumerate(self.domain)})
        # Units of each domain value, computed once (a report's value is a domain value).
        object.__setattr__(self, "_units", tuple(self._grid_units(v) for v in self.domain))

    def domain_index(self, value: float) -> int:
        j = self._index.get(float(value))  # type: ignore[attr-defined]
        if j is None:
            raise Rejected("out_of_domain")
        return int(j)

    def units(self, value: float) -> int:
        j = self._index.get(float(value))  # type: ignore[attr-defined]
        if j is not None:
            units = self._units[j]  # type: ignore[attr-defined]
            if units is None:
                raise Rejected("out_of_domain")
            return int(units)
        return self._units_or_reject(value)

    def _grid_units(self, value: float) -> int | None:
        q = Fraction(value) / Fraction(2) ** self.grid_log2
        return int(q) if q.denominator == 1 else None

    def _units_or_reject(self, value: float) -> int:
        units = self._grid_units(value)
        if units is None:  # domain values are on the grid (checked at start-up)
            raise Rejected("out_of_domain")
        return units


def _new_user(partition: int, rules: Rules) -> UserState:
    return UserState(partition=partition, counts=(0,) * len(rules.domain))


def apply_report(
    state: UserState | None, report: Report, partition: int, rules: Rules
) -> UserState:
    """New state after an accepted report; Rejected for out_of_domain/not_present/duplicate."""
    j = rules.domain_index(report.value)
    units = rules.units(report.value)
    if state is None or not state.present:
        if not rules.auto_join:
            raise Rejected("not_present")
        state = replace(state or _new_user(partition, rules), present=True)
    if report.report_id in state.recent_ids:
        raise Rejected("duplicate_report")
    counts = list(state.counts) if len(state.counts) == len(rules.domain) else [0] * len(
        rules.domain
    )
    counts[j] += 1
    ids = (*state.recent_ids, report.report_id)[-rules.dedup_window :]
    newer = state.value_ts is None or report.ts >= state.value_ts
    return replace(
        state,
        partition=partition,
        counts=tuple(counts),
        recent_ids=ids,
        value_units=units if newer else state.value_units,
        value_ts=report.ts if newer else state.value_ts,
    )


def apply_membership(
    state: UserState | None, event: Membership, partition: int, rules: Rules
) -> UserState:
    """New state after a join/leave; Rejected for already_present/unknown_user/unknown_group."""
    if event.event == "join":
        if state is not None and state.present:
            raise Rejected("already_present")
        if event.group is None and rules.group_required:
            raise Rejected("unknown_group")
        if event.group is not None and rules.known_groups is not None:
            if event.group not in rules.known_groups:
                raise Rejected("unknown_group")
        base = state or _new_user(partition, rules)
        group = event.group if event.group is not None else base.group
        return replace(base, partition=partition, present=True, group=group)
    if state is None or not state.present:
        raise Rejected("unknown_user")
    return replace(state, partition=partition, present=False)


def recalibrated(state: UserState, calibrate: Calibrate) -> UserState:
    theta, spread, binding = calibrate(state)
    return replace(state, theta=float(theta), spread=float(spread), binding_pair=binding)


class MaxTracker:
    """Max of per-key values under updates: a heap with lazy deletion, O(log N) amortised.

    Each update pushes a fresh entry; stale entries (older version of a key) are dropped when
    they reach the top. The heap is rebuilt when stale entries outnumber live ones, so memory
    stays O(live keys).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int, Any]] = {}
        self._versions = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def update(self, key: str, value: float, payload: Any = None) -> None:
        version = next(self._versions)
        self._live[key] = (value, version, payload)
        heapq.heappush(self._heap, (-value, version, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [(-v, ver, k) for k, (v, ver, _) in self._live.items()]
            heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        self._live.pop(key, None)

    def top(self) -> tuple[float, str, Any] | None:
        """(max value, its key, its payload), or None when empty."""
        while self._heap:
            neg, version, key = self._heap[0]
            live = self._live.get(key)
            if live is not None and live[1] == version:
                return -neg, key, live[2]
            heapq.heappop(self._heap)
        return None


@dataclass
class PartitionAggregate:
    """The partial aggregates of one input partition, kept incrementally."""

    partition: int
    sum_units: int = 0
    thetas: MaxTracker = field(default_factory=MaxTracker)
    spreads: MaxTracker = field(default_factory=MaxTracker)
    newest_ts: float = 0.0
    new_events: int = 0
    dirty: bool = True

    def apply(self, user_id: str, old: UserState | None, new: UserState) -> None:
        """Replace one user's contribution (O(log N))."""
        self.sum_units += new.contribution_units - (old.contribution_units if old else 0)
        self.thetas.update(user_id, new.theta, new.binding_pair)
        self.spreads.update(user_id, new.spread)
        self.dirty = True

    def note_event(self, ts: float | None) -> None:
        if ts is not None and ts > self.newest_ts:
            self.newest_ts = ts
        self.new_events += 1
        self.dirty = True

    @property
    def theta(self) -> float:
        top = self.thetas.top()
        return top[0] if top else 0.0

    @property
    def binding_pair(self) -> str | None:
        top = self.thetas.top()
        return top[2] if top and top[0] > 0 else None

    @property
    def spread(self) -> float:
        top = self.spreads.top()
        return top[0] if top else 0.0

    @classmethod
    def rebuild(
        cls, partition: int, users: Sequence[tuple[str, UserState]]
    ) -> PartitionAggregate:
        """From the recovered table (once per assignment, not per event)."""
        agg = cls(partition=partition)
        for user_id, st in users:
            if st.partition == partition:
                agg.apply(user_id, None, st)
                if st.value_ts is not None and st.value_ts > agg.newest_ts:
                    agg.newest_ts = st.value_ts
        agg.dirty = True
        return agg
