"""One record on its user's draft, with the hold: a report of a user not present yet is kept
until the join (stream_app/domain/hold.py), applied then, oldest first."""

from __future__ import annotations

from stream_app.domain import hold
from stream_app.domain.batch import HELD, Later, Letter, Touched
from stream_app.domain.draft import Draft
from stream_app.domain.inputs import MembershipIn, ReportIn
from stream_app.domain.rejection import Rejected
from stream_app.domain.rules import EventRules


class Applier:
    """Applies records to drafts."""

    def __init__(self, rules: EventRules, hold_rules: hold.HoldRules, reports_topic: str):
        self.rules = rules
        self.hold_rules = hold_rules
        self.reports_topic = reports_topic
        self.now = 0.0  # the worker's clock at the batch's start (a held report's time)

    def report(self, t: Touched, report: ReportIn, partition: int,
               offset: int | None) -> str | None:
        """None (applied), HELD, "late_after_leave", or Rejected (the draft unchanged)."""
        try:
            t.draft.report(report, partition, self.rules)
        except Rejected as rej:
            if rej.reason != "not_present":
                raise
            return self._not_present(t.draft, report, partition, offset)
        return None

    def membership(self, t: Touched, user_id: str, event: MembershipIn,
                   partition: int) -> None:
        """A join/leave (a join applies the user's held reports), or Rejected."""
        t.draft.membership(event, partition, self.rules)
        if t.draft.held and t.draft.present:
            self._apply_held(t, user_id)

    def _not_present(self, draft: Draft, report: ReportIn, partition: int,
                     offset: int | None) -> str:
        """A report of a user who is not present: late, held, or refused (with the reason)."""
        if hold.before_leave(draft, report.ts):
            return "late_after_leave"
        why = hold.refusal(draft, self.hold_rules)
        if why is not None:
            raise Rejected("not_present", why)
        hold.hold(draft, report, partition, offset, self.now)
        return HELD

    def _apply_held(self, t: Touched, user_id: str) -> None:
        """At the user's join: its held reports, oldest first, as if they came after it."""
        later = t.later = t.later or Later()
        draft = t.draft
        for report, h in hold.take_held(draft, user_id):
            if hold.before_leave(draft, report.ts):
                later.late += 1
                continue
            try:
                draft.report(report, h.partition, self.rules)
            except Rejected as rej:
                later.letters.append(Letter(self.reports_topic, hold.encode(report),
                                            rej.reason, h.partition, h.offset, rej.detail))
                continue
            later.applied += 1
            if report.ts > t.newest_ts:
                t.newest_ts = report.ts
