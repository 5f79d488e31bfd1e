"""Tree mode's part of a partition aggregate (``PartitionAggregate``, aggregate.py, holds the
fields): the sum of admitted contributions in the partition's window, and the final one of the
window before (stream_app/domain/admission.py; docs/design.md, "Continual release: wiring the
tree"). A rebuilt aggregate reads the window before's from each user's stored state.
"""

from __future__ import annotations

from collections.abc import Sequence

# (window, admitted units, the window before's final admitted units or None, raw sum units)
TreeState = tuple[int, int, int | None, int]


class AdmittedSums:
    sum_units: int
    dirty: bool
    window: int
    gaps: dict[str, tuple[int, int, int | None]]
    gap_units: int
    previous_units: int | None
    durable: TreeState | None

    def roll(self, window: int, settled: bool = False) -> None:
        """Enter ``window`` (never back): every user's admitted contribution becomes its raw
        one, except those already counting in ``window`` (another worker's clock ahead). When
        the state rolled was acknowledged (``durable`` is it, or ``settled``: the caller knows
        no write of the partition is pending), the rolled one is too: a
        partition whose first record in the window is still unacknowledged shows the window,
        not the one before, so a tick never waits on whether a user reported (docs/privacy.md,
        "Continual release", "On the worker")."""
        if window <= self.window:
            if settled:
                self.durable = self.tree_state()
            return
        settled = settled or (self.durable is not None and self.durable == self.tree_state())
        if self.window < 0:  # rebuilt: the window before from the users' stored states
            self.previous_units = self._rebuilt_previous(window)
        else:  # a window skipped had no record here: it ended at its base, the raw sum
            self.previous_units = self.admitted_units if window == self.window + 1 \
                else self.sum_units
        self.gaps = {u: g for u, g in self.gaps.items() if g[0] >= window and g[1]}
        self.gap_units = sum(g[1] for g in self.gaps.values())
        self.window = window
        if settled:  # nothing unacknowledged: a recovery rolls the same state the same way
            self.durable = self.tree_state()
        self.dirty = True

    def _rebuilt_previous(self, window: int) -> int:
        """The final admitted sum of ``window - 1`` from the users' stored states; never
        unknown, so that whether a release can read it never depends on users' data. A state
        of a later window than the clock's (another worker's clock ahead: docs/privacy.md
        states the assumption) gives its own window before's; a stored state without one
        (older format) its raw contribution."""
        total = self.sum_units
        for at, gap, before in self.gaps.values():
            if at >= window:
                total += before or 0
            elif at == window - 1:
                total += gap
        return total

    def note_admitted(self, user_id: str, state: Sequence[int] | None, raw: int) -> None:
        """A user's admission state (stream_app.domain.admission.Admitted) after a batch, its
        raw contribution ``raw``."""
        old = self.gaps.pop(user_id, None)
        if old is not None and old[0] >= self.window:
            self.gap_units -= old[1]
        if not state:
            return
        before = state[3] - raw if len(state) > 3 else None
        # (the window before's value matters only to a rebuild: its first roll reads it)
        if state[1] != raw or (self.window < 0 and before != 0):
            self.gaps[user_id] = (state[0], state[1] - raw, before)
            if state[0] >= self.window:
                self.gap_units += state[1] - raw

    @property
    def admitted_units(self) -> int:
        """The sum of admitted contributions in ``window``."""
        return self.sum_units + self.gap_units

    def tree_state(self) -> TreeState:
        return self.window, self.admitted_units, self.previous_units, self.sum_units

    def partial_fields(self, pending: bool) -> dict[str, int | None] | None:
        """A tree-mode partial's fields (with its ``sum_units``): while the partition has
        writes not acknowledged, its state as of the last acknowledged ones (a crash never takes
        back what a release showed); None: nothing acknowledged yet."""
        state = self.durable if pending else self.tree_state()
        if state is None:
            return None
        return dict(window=state[0], admitted_units=state[1], previous_units=state[2],
                    sum_units=state[3])
