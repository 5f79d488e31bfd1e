"""Reports that arrive before their user's join: held in the user's state, not refused.

``reports`` and ``membership`` are two topics consumed independently, so a user's report can
be handled before the join produced earlier (by the same or another producer). Such a report is
kept in the user's state (the changelog table: durable across SIGKILL and restart) for
``join_grace_seconds`` of the worker's clock, applied when the join arrives, and dead-lettered
``not_present`` only once the grace has passed. A report produced before the user's latest
leave (``ts <= left_ts``) but arriving after it changes nothing: it is counted as
``late_after_leave`` (events ignored), not refused. docs/design.md, "Per-user order".

Bounded per user only: at most ``max_held_reports_per_user`` (beyond it, the report is
dead-lettered ``not_present`` at once, with the bound as detail). Whether a report is held
depends on its own user's state alone: no bound shared across users, so one user's reports never
decide whether another's count (docs/privacy.md, "Reports held until a join"; memory: per-user
bound x users who have not joined, docs/operations.md). Nothing here is published: holding only
delays when a value enters the exact sum (no privacy charge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from stream_app.domain.draft import Draft
from stream_app.domain.inputs import ReportIn, tuple_new


class Held(NamedTuple):
    """A held report as stored in the user's state (a JSON list of these fields)."""

    value: float
    ts: float
    report_id: str
    partition: int
    offset: int | None
    arrived: float  # the worker's wall clock when it was held


@dataclass(frozen=True)
class HoldRules:
    grace_seconds: float
    per_user: int

    @classmethod
    def of(cls, settings: Any) -> HoldRules:
        return cls(settings.join_grace_seconds, settings.max_held_reports_per_user)


class Expired(NamedTuple):
    """A held report whose grace passed: its dead letter's fields."""

    raw: bytes  # the report re-encoded (the original bytes are not kept)
    partition: int
    offset: int | None
    detail: str


def before_leave(draft: Draft, ts: float) -> bool:
    """Whether a report stamped ``ts`` was produced before the user's latest leave (then it
    changes nothing: ``late_after_leave``)."""
    return draft.left_ts is not None and ts <= draft.left_ts


def refusal(draft: Draft, rules: HoldRules) -> str | None:
    """Why the report cannot be held (the dead letter's detail), or None: a function of the
    user's own draft and the settings only."""
    if rules.grace_seconds <= 0:
        return "the user has not joined (join_grace_seconds is 0)"
    if len(draft.held) >= rules.per_user:
        return f"the user has not joined and holds max_held_reports_per_user={rules.per_user}"
    return None


def hold(draft: Draft, report: ReportIn, partition: int, offset: int | None,
         now: float) -> None:
    """Keep ``report`` in the draft of a user who is not present."""
    draft.held = [*draft.held, [report.value, report.ts, report.report_id, partition, offset, now]]
    draft.exists = True


def take_held(draft: Draft, user_id: str) -> list[tuple[ReportIn, Held]]:
    """The held reports, oldest ``ts`` first (to apply after a join); the draft keeps none."""
    held = sorted((Held(*h) for h in draft.held), key=lambda h: h.ts)
    draft.held = []
    return [(tuple_new(ReportIn, (user_id, h.value, h.report_id, h.ts)), h) for h in held]


def encode(report: ReportIn) -> bytes:
    """A held report's bytes for its dead letter (the original bytes are not kept)."""
    return orjson.dumps({"user_id": report.user_id, "value": report.value,
                         "report_id": report.report_id, "ts": report.ts})


def expire(draft: Draft, user_id: str, now: float, grace_seconds: float) -> list[Expired]:
    """Remove the held reports older than the grace; their dead letters."""
    keep, gone = [], []
    for fields in draft.held:
        h = Held(*fields)
        if now - h.arrived >= grace_seconds:
            raw = encode(tuple_new(ReportIn, (user_id, h.value, h.report_id, h.ts)))
            gone.append(Expired(raw, h.partition, h.offset,
                                f"the user did not join within join_grace_seconds="
                                f"{grace_seconds:g}"))
        else:
            keep.append(fields)
    draft.held = keep
    return gone
