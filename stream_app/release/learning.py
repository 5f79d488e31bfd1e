"""The release agent's learning round: a DP estimate of each group's law on ``priors``, charged
on the release accountant, then the laws in force and theta recalibrated (docs/privacy.md,
"Learned priors"). A part of ``Releaser`` (releaser.py, passed as ``self``: typed Any, since
the releaser imports this module), which owns the state it uses."""

from __future__ import annotations

import time
from typing import Any

from pufferfish_core.learning_radius import robust_round
from stream_app.domain.models import PriorsRecord, to_bytes
from stream_app.release.records import TickFacts, combine, priors_records
from stream_app.release.restore import in_force


async def learn(self: Any, tick: int) -> list[PriorsRecord] | None:
    s, learner = self.settings, self.learner
    assert learner is not None
    if not await self.ready_to_draw(learner.charge()):
        return None
    _, sums, _ = combine(self.partials())
    now = time.time()  # read before the draw: the sampler's running time depends on the noise
    learned = robust_round(learner, sums, self.laws, self.radii, s.prior_confidence_beta)
    charge = learner.charge()
    seq, spent = self.ledger.next_round(charge)
    # built and validated before the charge: a record that cannot exist costs nothing
    records = priors_records(seq, now, learned, learner.epsilon_learn, spent,
                             TickFacts(tick, self.ledger.window))
    if records is None:
        # the same records every time: this tick's round is given up, its release goes on
        self.ledger.last_round_tick = max(self.ledger.last_round_tick, tick)
        return None
    self.ledger.charge_round(charge)  # = seq, spent: nothing awaited since next_round
    if not self.ledger.intent():
        return None
    for r in records:
        self.journals.sent(s.topic_priors, r.seq, r.ts)
    for record in records:
        if not await self.publisher.send(s.topic_priors, to_bytes(record)):
            self.invalidate()  # it may have reached the journal: read it before the retry
            return None
    self.ledger.last_round_tick = max(self.ledger.last_round_tick, tick)
    self.laws, self.radii, _ = in_force(records, self.laws, self.radii)  # as readers see them
    self.priors_seq = seq
    self.plan = self.recalibrate()
    self.said_zero_theta = False
    if self.tree is not None:
        self.tree.note_round(records)
    self.metrics.learning_rounds.inc()
    self.metrics.priors_seq.set(seq)
    return records
