"""The release agent's release of one tick: the exact sum of the partials plus the noise of its
mechanism (independent draws with the plan's theta, the window's tree, or each group's draws
with ``release_by_group``), charged on the release accountant, its intent written before its
send (docs/design.md, "Release durability"). A part of ``Releaser`` (releaser.py, passed as
``self``: typed Any, since the releaser imports this module), which owns the state it uses."""

from __future__ import annotations

import logging
import time
from typing import Any

from pufferfish_core.noise import discrete_laplace_units, exact_float
from stream_app.domain.models import Release, to_bytes
from stream_app.release.records import combine, release_record

log = logging.getLogger(__name__)


async def release(self: Any, tick: int) -> Release | None:
    s, plan = self.settings, self.plan
    if plan.theta <= 0:
        # theta 0 would publish the exact sum: the published laws need no noise
        if not self.said_zero_theta:
            log.warning("no release: theta is 0 for the laws of priors round %d",
                        self.priors_seq)
            self.said_zero_theta = True
        self.ticks.settle(tick)
        return None
    tree = self.tree.open(tick, self.ledger.window) if self.tree is not None else None
    if self.tree is not None and tree is None:
        self.ticks.settle(tick)  # no budget for the window's tree (tree_release.py)
        return None
    by_group = self.by_group
    charge = (tree.charge if tree is not None else plan.charge() if by_group is None
              else by_group.charge())
    partials = self.partials()
    if tree is not None and not tree.ready(partials):
        return None  # a partition behind the tick's window: tried again shortly
    if by_group is not None and not by_group.ready(partials):
        return None  # a partial of an older worker: tried again (group_release.py)
    if not await self.ready_to_draw(charge):
        if self.ledger.exhausted:
            self.ticks.settle(tick)
        return None
    total_units, _, consumed = combine(partials)
    now = time.time()  # read before the draw: the sampler's running time depends on the noise
    drawn = by_group.draw(partials) if by_group is not None else None
    noisy_units = (drawn.total_units() if drawn is not None else await tree.draw()
                   if tree is not None else
                   discrete_laplace_units(total_units, plan.theta, plan.grid_log2))
    seq, books = self.ledger.charge_release(charge), self.ledger.accountant
    noisy = exact_float(noisy_units, plan.grid_log2)
    groups = by_group.fields(drawn) if by_group is not None and drawn is not None else None
    if noisy is None or (drawn is not None and groups is None):
        if self.ledger.refuse(seq, "sum_not_representable") and tree is not None \
                and self.tree is not None:
            self.tree.charged(tree.window)  # the window's charge is kept: paid once
        self.ticks.settle(tick)  # a gap decided by the charged noisy value only
        return None
    record = release_record(s, plan, seq, now, noisy, books, self.priors_seq, charge,
                            self.ticks.facts(tick, len(self.laws), self.learner is not None),
                            tree, groups)
    if not self.ledger.intent(record):
        return None
    if tree is not None and self.tree is not None:
        self.tree.charged(tree.window)  # on the books even if the send fails
    self.journals.sent(s.topic_releases, record.seq, record.ts)
    if not await self.publisher.send(s.topic_releases, to_bytes(record)):
        self.invalidate()  # it may have reached the journal: read it before the retry
        return None
    self.ticks.published(tick)
    self.timing.published(record, self.ticks.due(tick), consumed)
    return record
