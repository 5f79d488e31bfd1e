"""The release agent's books: the accountant, the last seqs, exhaustion, the local intent file.

Every charge is recorded in the local high-water file (stream_app.release.local_state) before
anything is sent, so a crash at any point leaves a file that counts at least every record the
journals can hold; a failed send burns its seq and keeps its charge (the record may have
reached the broker). A charge whose intent could not be written is undone: nothing was sent.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from fractions import Fraction

from pufferfish_core.budget import Accountant, BudgetExhausted
from pufferfish_core.clock import window_at
from pufferfish_core.distribution import Distribution
from stream_app.domain.models import PriorsRecord, Release
from stream_app.metrics import Metrics
from stream_app.release.local_state import LocalState, load_state, merged, save_state, state_path
from stream_app.release.restore import Restored, accountant_at_least, restore
from stream_app.settings import Settings

log = logging.getLogger(__name__)


class Ledger:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.state_file = state_path(settings)
        self._local = load_state(self.state_file)  # corrupt -> PufferfishInputError at start
        self.accountant = Accountant(settings.budget_total)
        self.last_seq = 0
        self.last_priors_seq = 0
        self.exhausted = False
        self.window: int | None = None  # the privacy window of the accountant
        self.last_tick = -1  # newest tick published (journals and this worker; -1: none)
        self.last_round_tick = -1  # newest tick whose learning round is settled
        self.window_rounds = 0  # learning rounds charged in this window (all without windows)
        if settings.budget_window_seconds is not None:
            metrics.show_window()
        # the books before the latest charge, until its intent is written (undone if it is not)
        self._before: tuple[Accountant, int, int, int] | None = None

    def window_of(self, now: float | Fraction) -> int | None:
        """floor(now / budget_window_seconds) on the public clock, exactly (``now``: a tick's
        exact due time, core.clock.tick_due_exact); None without windows."""
        size = self.settings.budget_window_seconds
        return None if size is None else window_at(now, size)

    def rounds_in_horizon(self) -> int:
        """R of the failure bound G·R·β so far, in the horizon of ``pufferfish plan``: every
        round without windows; with windows, this window's rounds plus the one in force when
        it opened (any round before it). Burned seqs count: their records may be out."""
        if self.settings.budget_window_seconds is None:
            return self.last_priors_seq
        return self.window_rounds + (1 if self.last_priors_seq > self.window_rounds else 0)

    def roll(self, now: float | Fraction) -> None:
        """A new privacy window renews the budget (never an earlier one: clocks may step back).
        ``now``: the due time of the tick being published (its window is the tick's)."""
        window = self.window_of(now)
        size = self.settings.budget_window_seconds
        if window is None or size is None:
            return
        self.metrics.budget_window_remaining_seconds.set(float((window + 1) * size - now))
        if self.window is not None and window <= self.window:
            return
        self.window, self.accountant = window, Accountant(self.settings.budget_total)
        self.window_rounds = 0
        if self.exhausted:
            log.warning("privacy window %d: the budget is renewed", window)
        self.exhausted = False
        self.metrics.budget_exhausted.set(0)
        self.publish_metrics()

    def restore(
        self,
        releases: Sequence[Release],
        priors: Sequence[PriorsRecord],
        initial: Mapping[str, Distribution],
        initial_radii: Mapping[str, float],
        now: float | Fraction,
    ) -> Restored:
        """Adopt the max over the journals, the local file and what is known (stream_app.release
        .restore); the laws in force are returned for the releaser."""
        self._local = merged(self._local, load_state(self.state_file))
        window = self.window_of(now)
        if window is not None and window != self.window:
            self.window, self.accountant = window, Accountant(self.settings.budget_total)
            self.window_rounds = 0
        got = restore(self.settings.budget_total, releases, priors, self._local,
                      self.accountant, self.last_seq, initial, initial_radii, window)
        self.accountant, self.last_seq = got.accountant, got.last_seq
        self.last_priors_seq = max(self.last_priors_seq, got.last_priors_seq)
        # ticks: from the journals only (a tick whose send failed may be published again)
        self.last_tick = max(self.last_tick, got.last_tick)
        self.last_round_tick = max(self.last_round_tick, got.last_round_tick)
        self.window_rounds = max(self.window_rounds, got.window_rounds)
        self.exhausted = False
        if got.exhausted:
            self.mark_exhausted(got.exhausted)
        self.publish_metrics()
        return got

    def adopt(self, foreign: Sequence[Release | PriorsRecord]) -> None:
        """Records another owner published: never reuse their seqs or undercount their spend."""
        for r in foreign:
            if isinstance(r, Release):
                self.last_seq = max(self.last_seq, r.seq)
                self.last_tick = max(self.last_tick, -1 if r.tick is None else r.tick)
            else:
                self.last_priors_seq = max(self.last_priors_seq, r.seq)
                self.last_round_tick = max(self.last_round_tick,
                                           -1 if r.tick is None else r.tick)
        spent = max((r.epsilon_spent for r in foreign), default=0.0)
        if spent > self.accountant.spent:
            try:
                self.accountant = accountant_at_least(self.settings.budget_total, spent)
            except BudgetExhausted:
                self.mark_exhausted("another worker spent the budget")

    def affordable(self, charge: float) -> bool:
        """Whether ``charge`` fits (0: a tree release after its window's first, always)."""
        if charge == 0 or self.accountant.can_spend(charge):
            return True
        self.mark_exhausted(f"the next charge would be {charge:g}")
        return False

    def next_round(self, charge: float) -> tuple[int, float]:
        """The seq and epsilon_spent a learning round charging ``charge`` would publish, without
        charging anything (its records are built and validated before the charge)."""
        books = copy.deepcopy(self.accountant)
        books.spend(charge)
        return self.last_priors_seq + 1, books.spent

    def _remember(self) -> None:
        self._before = (copy.deepcopy(self.accountant), self.last_seq, self.last_priors_seq,
                        self.window_rounds)

    def charge_release(self, charge: float) -> int:
        """Spend and burn the next release seq (a seq never carries two values)."""
        self._remember()
        if charge:
            self.accountant.spend(charge)
        self.last_seq += 1
        return self.last_seq

    def charge_round(self, charge: float) -> int:
        """Spend and burn the next learning-round seq."""
        self._remember()
        self.accountant.spend(charge)
        self.last_priors_seq += 1
        self.window_rounds += 1
        return self.last_priors_seq

    @property
    def last_intent(self) -> Release | None:
        """The last release written to the local file before its send (sent or not)."""
        return self._local.last_release if self._local else None

    def intent(self, record: Release | None = None) -> bool:
        """Write the local high-water file before anything is sent; False if it failed, and
        then the latest charge is undone (nothing was sent: a failed tick charges nothing)."""
        last = record or self.last_intent
        state = LocalState(self.last_seq, self.accountant, last, self.last_priors_seq,
                           self.window)
        before, self._before = self._before, None
        try:
            save_state(self.state_file, state)
        except OSError as exc:
            if before is not None:
                self.accountant, self.last_seq, self.last_priors_seq, self.window_rounds = before
            log.error("not sent: the local budget file could not be written (%s); nothing "
                      "charged", type(exc).__name__)
            return False
        self._local = state
        self.publish_metrics()
        return True

    def refuse(self, seq: int, reason: str) -> bool:
        """Release ``seq`` is drawn and charged but not published: burn it, keep its charge
        (False: the local file could not be written, and nothing was charged)."""
        self.metrics.releases_refused.labels(reason=reason).inc()
        if not self.intent():
            return False
        log.error("release seq %d not published: the noisy sum is beyond 2**53 grid units, "
                  "which the JSON float noisy_sum cannot hold exactly; its seq and charge "
                  "are kept (use a coarser grid_log2)", seq)
        return True

    def mark_exhausted(self, why: str) -> None:
        if not self.exhausted:
            log.warning("privacy budget exhausted (%s): releases and learning stop", why)
        self.exhausted = True
        self.metrics.budget_exhausted.set(1)

    def publish_metrics(self) -> None:
        self.metrics.epsilon_spent.set(self.accountant.spent)
        self.metrics.epsilon_remaining.set(max(self.accountant.remaining, 0.0))
