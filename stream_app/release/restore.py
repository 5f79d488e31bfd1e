"""Restore the release agent's state from its journals and local file (pure, no I/O).

The budget spent and the last seqs are the max over the ``releases`` journal, the ``priors``
journal and the local high-water file, so losing any one of them never lowers the spent budget
or reuses a seq. The laws in force are the newest published law of each configured group
(docs/privacy.md, "Learned priors"); a group never published keeps its round-0 law.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pufferfish_core.budget import Accountant, BudgetExhausted
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from stream_app.domain.models import PriorsRecord, Release
from stream_app.release.local_state import LocalState


@dataclass
class Restored:
    accountant: Accountant
    last_seq: int
    last_priors_seq: int
    laws: dict[str, Distribution]
    priors_seq: int  # newest round whose laws are in force (0: the settings' laws)
    exhausted: str | None = None  # why the budget is already exhausted, if it is
    radii: dict[str, float] = field(default_factory=dict)  # of the laws in force
    last_tick: int = -1  # newest tick with a release in the journal (-1: none)
    last_round_tick: int = -1  # newest tick with a learning round in the journal (-1: none)
    window_rounds: int = 0  # learning rounds in the journal charged to ``window`` (all: None)


def accountant_at_least(total: float, spent: float) -> Accountant:
    """An accountant that has spent ``spent`` (one charge); BudgetExhausted if over total."""
    accountant = Accountant(total)
    if spent > 0:
        accountant.spend(spent)
    return accountant


def laws_in_force(
    records: Sequence[PriorsRecord], initial: Mapping[str, Distribution], up_to: int | None = None
) -> tuple[dict[str, Distribution], int]:
    """Newest law per configured group among rounds <= up_to (all when None), and the round."""
    laws, _, round_ = in_force(records, initial, {}, up_to)
    return laws, round_


def in_force(
    records: Sequence[PriorsRecord],
    initial: Mapping[str, Distribution],
    initial_radii: Mapping[str, float],
    up_to: int | None = None,
) -> tuple[dict[str, Distribution], dict[str, float], int]:
    """Newest law and radius per configured group among rounds <= up_to, and the round."""
    laws, radii = dict(initial), dict(initial_radii)
    newest: dict[str, int] = {}
    for rec in records:
        if rec.group not in laws or (up_to is not None and rec.seq > up_to):
            continue
        if rec.seq < newest.get(rec.group, 0):
            continue
        try:
            laws[rec.group] = Distribution.from_points(rec.support, rec.probs)
        except PufferfishInputError:
            continue
        radii[rec.group] = rec.radius
        newest[rec.group] = rec.seq
    return laws, radii, max(newest.values(), default=0)


def restore(
    total: float,
    releases: Sequence[Release],
    priors: Sequence[PriorsRecord],
    local: LocalState | None,
    known: Accountant,
    last_seq: int,
    initial: Mapping[str, Distribution],
    initial_radii: Mapping[str, float] | None = None,
    window: int | None = None,
) -> Restored:
    """With privacy windows, the budget restored is that of ``window`` only: the charges that
    the journals and the local file record for it (``known`` must belong to it too)."""
    every: list[Release | PriorsRecord] = [*releases, *priors]
    charged = [r for r in every if window is None or r.window == window]
    spent_journal = max((r.epsilon_spent for r in charged), default=0.0)
    seq = max([r.seq for r in releases] + [local.last_seq if local else 0, last_seq])
    priors_seq = max([p.seq for p in priors] + [local.last_priors_seq if local else 0])
    best = known
    same_window = local is not None and (window is None or local.window == window)
    if local is not None and same_window and local.accountant.spent > best.spent:
        best = local.accountant
    exhausted = None
    if spent_journal > best.spent:
        try:
            best = accountant_at_least(total, spent_journal)
        except BudgetExhausted:
            exhausted = "the journals already spent more than budget_total"
    if best.total != total:  # budget_total was changed: replay the exact charges
        rebased = Accountant(total)
        try:
            for charge in best.charges:
                rebased.spend(charge)
            best = rebased
        except BudgetExhausted:
            exhausted = "the recorded spending exceeds the new budget_total"
    laws, radii, round_ = in_force(priors, initial, initial_radii or {})
    return Restored(best, seq, priors_seq, laws, round_, exhausted, radii,
                    last_tick=max((r.tick for r in releases if r.tick is not None), default=-1),
                    last_round_tick=max((p.tick for p in priors if p.tick is not None),
                                        default=-1),
                    window_rounds=len({p.seq for p in priors
                                       if window is None or p.window == window}))
