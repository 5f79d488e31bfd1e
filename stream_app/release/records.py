"""The records a tick publishes, built from public inputs and one noisy draw."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from pufferfish_core.budget import Accountant
from pufferfish_core.learning_radius import RoundLaw
from pufferfish_core.plan import ReleasePlan
from stream_app.domain.models import Partial, PriorsRecord, Release
from stream_app.settings import Settings

if TYPE_CHECKING:
    from stream_app.release.group_release import GroupFields
    from stream_app.release.tree_release import OpenTree

log = logging.getLogger(__name__)


def combine(partials: Mapping[int, Partial]) -> tuple[int, dict[str, list[int]], float]:
    """(sum in grid units, per-group share sums, when the newest included record was consumed
    on its worker's clock) over input partitions."""
    total = sum(p.sum_units for p in partials.values())
    groups: dict[str, list[int]] = {}
    for p in partials.values():
        for group, bins in p.group_units.items():
            acc = groups.setdefault(group, [0] * len(bins))
            for j, units in enumerate(bins):
                acc[j] += units
    newest = max((p.consumed_at for p in partials.values()), default=0.0)
    return total, groups, newest


@dataclass(frozen=True)
class TickFacts:
    """What a tick's records say about the clock and the failure bound (public inputs)."""

    tick: int
    window: int | None
    learning_rounds: int = 0
    failure_probability: float = 0.0


def release_record(s: Settings, plan: ReleasePlan, seq: int, now: float, noisy: float,
                   books: Accountant, priors_seq: int, charge: float,
                   facts: TickFacts, tree: OpenTree | None = None,
                   groups: GroupFields | None = None) -> Release:
    """``tree``: the tick's tree (tree mode): theta is its node scale, ``priors_seq`` the round
    whose laws calibrated it (the one in force when the window opened, not a round learned
    since), and the record names the draws it adds (all functions of the settings, the clock
    and the published laws), and so is its error bar (``noise_sd``, ``ci95_half_width``: of
    the draws it adds, core/error_bars.py). ``groups`` (release_by_group): ``noisy`` is the
    sum of the groups' noisy sums, the error bar that sum's, theta the largest group's."""
    fields: dict[str, Any] = {} if tree is None or tree.drawn is None else dict(
        mechanism="tree", window_tick=tree.window_tick, nodes=list(tree.drawn.nodes),
        arity=tree.mechanism.shape.arity, max_changes_per_window=tree.mechanism.max_changes)
    bar = plan.error_bar() if tree is None else tree.mechanism.error_bar_at(tree.window_tick)
    theta = plan.theta if tree is None else tree.mechanism.scale
    binding_group = plan.binding_group
    if groups is not None:
        bar, theta, binding_group = groups.bar, groups.theta, groups.binding_group
        fields["groups"] = groups.groups
    return Release(
        seq=seq, ts=now, noisy_sum=noisy,
        theta=theta,
        epsilon=s.epsilon, epsilon_spent=books.spent,
        epsilon_remaining=max(books.remaining, 0.0),
        pairs=[p.value for p in s.pairs], rule=s.rule.value,
        binding_pair=plan.binding_pair.value if plan.binding_pair else None,
        binding_group=binding_group,
        priors_seq=priors_seq if tree is None else tree.priors_seq, charge=charge,
        window=facts.window, tick=facts.tick, learning_rounds=facts.learning_rounds,
        failure_probability=facts.failure_probability, noise_sd=bar.noise_sd,
        ci95_half_width=bar.ci95_half_width, **fields,
    )


def priors_records(seq: int, now: float, learned: Mapping[str, RoundLaw],
                   epsilon_learn: float, spent: float,
                   facts: TickFacts) -> list[PriorsRecord] | None:
    """A learning round's records, one per group; None (logged) when one is invalid."""
    try:
        return [
            PriorsRecord(seq=seq, ts=now, group=group, support=list(got.law.support),
                         probs=list(got.law.probs), epsilon_learn=epsilon_learn,
                         epsilon_spent=spent, radius=got.radius, status=got.status,
                         window=facts.window, tick=facts.tick)
            for group, got in sorted(learned.items())
        ]
    except ValidationError as exc:
        fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})
        log.error("learning round not published: invalid priors record (%s); nothing "
                  "charged", ", ".join(fields))
        return None
