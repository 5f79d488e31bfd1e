"""The tree mechanism's contribution bound on the input path: each user's contribution to the
sum (the latest value while present, else 0) may change at most w = ``max_changes_per_window``
times per window of the public clock (docs/design.md, "Continual release: wiring the tree";
the rule is ``core.tree_sensitivity.admitted``, docs/privacy.md "Continual release").

A change is a record that changes the user's raw contribution (a join with a value, a leave, a
new value; the same value again is none). It is admitted while fewer than w were admitted in
the window; after that the admitted contribution keeps its last value until the next window,
whose base is the raw contribution again. The latest value and the learning histogram always
update. Records are counted one by one (never per batch), so a user's admitted contribution is
a function of its own records and the window each was consumed in, never of how records were
batched with other users'.

The window of a record is the one of the worker's clock when it is applied, ``lead`` seconds
early (``window_at``): a partition rolls to window j slightly before j's first tick, so the
partial that carries its last changes of window j - 1 reaches the releaser before j's first
release reads it (docs/privacy.md, "Continual release", what the report times reveal).
Nothing here computes a privacy quantity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A user's admission state in its stored form: [window, admitted units, changes admitted,
# the final admitted units of the window before] (the last: a rebuilt aggregate's
# previous_units, for late ticks of that window after a takeover).
Admitted = list[int]


def roll_lead_seconds(release_period_seconds: float) -> float:
    """How early a partition enters the next window (at most half a release period)."""
    return min(1.0, release_period_seconds / 2)


@dataclass
class Admission:
    """The worker's bound and clock window (tree mode only; None in independent mode)."""

    max_changes: int
    window_seconds: float
    lead_seconds: float
    window: int = -1  # of the batch being applied (never moves back)
    held: int = 0  # changes not admitted since ``take_held``

    def window_at(self, now: float) -> int:
        """The window records applied at ``now`` count in (monotone on this worker)."""
        self.window = max(self.window, math.floor((now + self.lead_seconds)
                                                  / self.window_seconds))
        return self.window

    def take_held(self) -> int:
        held, self.held = self.held, 0
        return held

    def admit(self, state: Admitted | None, before: int, after: int) -> Admitted:
        """The user's admission state after a record moved its raw contribution from
        ``before`` to ``after`` (``state`` None or of an earlier window: the window's base is
        ``before``, the raw contribution when the window began for this user)."""
        if state is None or state[0] < self.window:
            last = state[1] if state is not None and state[0] == self.window - 1 else before
            state = [self.window, before, 0, last]
        if after == before or after == state[1]:
            return state  # no change, or back to the admitted value
        if state[2] < self.max_changes:
            state[1], state[2] = after, state[2] + 1
        else:
            self.held += 1
        return state


def admitted_units(state: Admitted | None, window: int, raw: int) -> int:
    """A user's contribution to window ``window``'s sum: the admitted one while its state is
    of that window (or a later one), else its raw contribution (the window's base)."""
    return state[1] if state is not None and state[0] >= window else raw


def admission_for(release_mechanism: str, max_changes: int, window_seconds: float | None,
                  release_period_seconds: float) -> Admission | None:
    """The worker's admission (tree mode, which requires a window), else None."""
    if release_mechanism != "tree" or window_seconds is None:
        return None
    return Admission(max_changes, window_seconds, roll_lead_seconds(release_period_seconds))
