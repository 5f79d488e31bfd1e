"""The release agent on a real broker, without Faust: budget, journal restore, theta 0,
learning rounds on the priors topic."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from fractions import Fraction
from pathlib import Path

import pytest

from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.learning_radius import RoundLaw, robust_round
from pufferfish_core.plan import release_plan
from pufferfish_core.vocabulary import PairKind, Rule
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.domain.models import Partial, PriorsRecord, Release
from stream_app.domain.priors import PublicPriors, public_priors
from stream_app.metrics import Metrics
from stream_app.release import Releaser, combine
from stream_app.release.journal import read_journal
from stream_app.settings import Settings
from tests.oracles import release_noise_sd

pytestmark = pytest.mark.integration


def partial(p: int, units: int, groups: dict[str, list[int]] | None = None) -> Partial:
    return Partial(partition=p, sum_units=units, group_units=groups or {}, newest_ts=1.0,
                   consumed_at=float(p))


def test_combine_is_exact_in_grid_units() -> None:
    parts = {0: partial(0, 3, {"a": [1, 2]}), 1: partial(1, -1, {"a": [5, 0], "b": [1, 1]}),
             2: partial(2, 10**20)}
    total, groups, consumed = combine(parts)
    # the newest consumption time, not the newest event ts (1.0 in every partial)
    assert (total, groups, consumed) == (2 + 10**20, {"a": [6, 2], "b": [1, 1]}, 2.0)
    assert combine({}) == (0, {}, 0.0)


@asynccontextmanager
async def running(s: Settings, parts: dict[int, Partial], owner: object = lambda: True,
                  priors: PublicPriors | None = None) -> AsyncIterator[Releaser]:
    """A Releaser over these partials, stopped on the way out."""
    r = Releaser(s, Metrics.create(), priors or public_priors(s), lambda: parts,
                 owner)  # type: ignore[arg-type]
    try:
        yield r
    finally:
        await r.stop()


async def settings(broker: EmbeddedBroker, data_dir: Path, topics: tuple[str, ...],
                   **kw: object) -> Settings:
    """Settings for one scenario, its topics created (one partition each)."""
    await create_topics(broker.bootstrap, dict.fromkeys(topics, 1))
    base: dict[str, object] = dict(
        broker=broker.url, domain=[0, 1, 2], epsilon=1.0, grid_log2=-2, metrics_port=None,
        journal_quiet_seconds=0.3, pairs=["value_presence"], data_dir=data_dir,
    )
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


async def _budget_and_restore(broker: EmbeddedBroker, data_dir: Path) -> None:
    # no learning round in the ticks below (rounds are epoch-aligned: one a day, at midnight)
    s = await settings(broker, data_dir, ("releases",), budget_total=3.5,
                       learn_period_seconds=86400.0)
    parts = {0: partial(0, 10), 1: partial(1, 6)}  # X = 16 * 0.25 = 4
    owner = {"yes": True}
    # one group "default", uniform on {0, 1, 2}: value_presence theta = 2 / eps, charge 1
    async with running(s, parts, lambda: owner["yes"]) as r1:
        owner["yes"] = False
        assert await r1.release_once() is None  # not the owner: nothing happens
        owner["yes"] = True
        first = [await r1.release_once() for _ in range(2)]
        assert [r.seq for r in first if r] == [1, 2]
        assert [r.epsilon_spent for r in first if r] == [1.0, 2.0]
        assert all(r is not None and r.theta == 2.0 and r.binding_pair == "value_presence"
                   and r.binding_group == "default" and r.charge == 1.0 and r.priors_seq == 0
                   for r in first)

    # a restarted releaser continues from the journal: same budget, next seq, no republish
    async with running(s, parts) as r2:
        m2 = r2.metrics
        third = await r2.release_once()
        assert third is not None and third.seq == 3 and third.epsilon_spent == 3.0
        assert third.epsilon_remaining == 0.5
        assert await r2.release_once() is None  # 3 + 1 > 3.5: refused
        assert r2.ledger.exhausted and m2.budget_exhausted._value.get() == 1
        assert await r2.release_once() is None
        # after the exhaustion the gauges stay on the books (3.5 - 3 x 1 left), through a
        # re-read of the journals (ownership may have moved) and the ticks settled after it
        r2.invalidate()
        for _ in range(3):
            tick = r2.next_tick()
            assert await r2.on_clock(tick) is None and r2.next_tick() == tick + 1
            assert (m2.epsilon_spent._value.get(), m2.epsilon_remaining._value.get(),
                    m2.budget_exhausted._value.get()) == (3.0, 0.5, 1)
    journal = await read_journal(s, s.topic_releases, Release)
    assert [r.seq for r in journal] == [1, 2, 3]
    assert [r.epsilon_spent for r in journal] == [1.0, 2.0, 3.0]
    for r in journal:
        assert (r.noisy_sum * 4).is_integer()  # on the 2**-2 grid
        # one draw of theta 2 on the 2**-2 grid: the pmf's sd; Pr[|L| > x] = e^-x: 2 ln 20 + g
        assert r.noise_sd == pytest.approx(release_noise_sd(2.0, 0.25, 1), rel=1e-12)
        assert r.ci95_half_width == pytest.approx(2.0 * math.log(20) + 0.25, rel=1e-8)

    # a third releaser sees the exhausted budget only when the next charge does not fit
    async with running(s, parts) as r3:
        m3 = r3.metrics  # books not loaded before the first tick: 0/0 (rules_test.yml)
        assert (m3.epsilon_spent._value.get(), m3.epsilon_remaining._value.get()) == (0, 0)
        assert await r3.release_once() is None and r3.ledger.last_seq == 3
        assert (m3.epsilon_spent._value.get(), m3.epsilon_remaining._value.get()) == (3.0, 0.5)


def test_budget_exhaustion_and_journal_restore(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_budget_and_restore(broker, tmp_path / "data"))


async def _zero_theta(broker: EmbeddedBroker, data_dir: Path) -> None:
    s = await settings(broker, data_dir, ("releases", "priors"))
    nothing = PublicPriors(laws={"default": point_zero()}, default_group="default")
    async with running(s, {0: partial(0, 4)}, priors=nothing) as r:
        assert r.plan.theta == 0.0
        assert await r.release_once() is None  # theta 0 would expose the exact sum
        assert r.ledger.last_seq == 0 and r.ledger.accountant.spent == 0


def test_zero_theta_never_releases(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_zero_theta(broker, tmp_path / "data"))


async def _learning(broker: EmbeddedBroker, data_dir: Path) -> None:
    s = await settings(broker, data_dir, ("releases", "priors"), groups=["a", "b"],
                       default_group="a", rule="exact",
                       pairs=["distribution_presence", "distribution_change"], epsilon_learn=0.5,
                       budget_total=10.0, learn_min_mass=1.0, prior_floor=0.1,
                       release_period_seconds=1.0, learn_period_seconds=2.0)
    units, users = 2**16, 40_000
    # group a: 40,000 users all at 2; group b: 40,000 users at 0; nobody in other bins. The
    # noise (scale 4 users a bin) moves a law by ~1e-4 (with 400 users the laws missed the
    # 0.05 tolerance below about once a hundred runs)
    parts = {0: partial(0, 2 * users * 4, {"a": [0, 0, users * units], "b": [users * units, 0, 0]})}
    async with running(s, parts) as r:
        tick = r.next_tick() | 1  # odd: no round due (one every second tick, the even ones)
        first = await r.on_clock(tick)
        assert first is not None and first.tick == tick and r.priors_seq == 0
        release = await r.on_clock(tick + 1)  # a learning round first, then the release
        assert release is not None and release.priors_seq == 1 and release.tick == tick + 1
    rounds = await read_journal(s, s.topic_priors, PriorsRecord)
    assert sorted(p.group for p in rounds) == ["a", "b"] and {p.seq for p in rounds} == {1}
    assert {p.tick for p in rounds} == {tick + 1}
    # G·R·β: 2 groups x 1 round x beta (the default 1e-6) once the round is out
    assert (first.learning_rounds, first.failure_probability) == (0, 0.0)
    assert (release.learning_rounds, release.failure_probability) == (1, 2 * 1e-6)
    assert all(p.status == "learned" for p in rounds)
    laws = {p.group: Distribution.from_points(p.support, p.probs) for p in rounds}
    radii = {p.group: p.radius for p in rounds}
    # 40,000 users in one bin: the law is (1 - 0.1) on it + 0.1/3 each. Missing by 0.01 takes
    # noise of ~440 users in all (|Z|_1 is below Gamma(3, 4) + 3: a probability below 1e-40)
    assert laws["a"].prob(2.0) == pytest.approx(0.9 + 0.1 / 3, abs=0.01)
    assert laws["b"].prob(0.0) == pytest.approx(0.9 + 0.1 / 3, abs=0.01)
    # the radius: the floor alone contributes 2 alpha (K-1)/K = 0.1333; the noise tail T for
    # K = 3 bins at scale 4 and beta 1e-6 is ~ 4 * 20 users, so 0.9 * 2T/40,000 adds ~0.004
    assert all(0.2 * 2 / 3 < r < 0.15 for r in radii.values()), radii
    releases = await read_journal(s, s.topic_releases, Release)
    assert [x.priors_seq for x in releases] == [0, 1]
    # the second release's theta is the robust exact theta of the published laws and radii:
    # every public pair passes the robust audit at it and the binding one fails just below
    domain = [0.0, 1.0, 2.0]
    pairs = [(laws["a"], point_zero(), radii["a"], 0.0), (laws["b"], point_zero(), radii["b"], 0.0),
             (laws["a"], laws["b"], radii["a"], radii["b"])]
    theta = releases[1].theta
    assert max(audit(x, y, theta, ra, rb, domain).loss for x, y, ra, rb in pairs) <= 1 + 1e-9
    assert max(audit(x, y, theta * 0.999, ra, rb, domain).loss for x, y, ra, rb in pairs) > 1
    # and it is larger than the plain theta of the same laws taken as exact
    assert theta > max(audit_theta_plain(x, y) for x, y, _, _ in pairs)
    # charges: release, learning round, release -- one accountant, in the journals
    assert rounds[0].epsilon_spent == pytest.approx(releases[0].charge + 0.5)
    assert releases[1].epsilon_spent == pytest.approx(
        releases[0].charge + 0.5 + releases[1].charge)


def audit_theta_plain(a: Distribution, b: Distribution) -> float:
    """The smallest theta on a 1e-4 relative grid whose plain exact loss is <= 1 (bisection)."""
    lo, hi = 1e-3, 100.0
    while hi / lo > 1 + 1e-4:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if audit(a, b, mid).loss > 1 else (lo, mid)
    return lo


def test_learning_round_publishes_every_group_and_recalibrates(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_learning(broker, tmp_path / "data"))


# a law whose probs a reader renormalises to other bits (normalising is not idempotent in
# floating point): found by a seeded search, checked below so the test cannot go stale
UNSTABLE = [0.0623495791498756, 0.641328169139375, 0.8526328384806567]


async def _theta_of_published(broker: EmbeddedBroker, data_dir: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    import stream_app.release.learning as releaser_module

    law = Distribution.from_counts([0, 1, 2], UNSTABLE)
    assert Distribution.from_points(law.support, law.probs) != law

    def learned_unstable(*args: object, **kw: object) -> dict[str, RoundLaw]:
        got = robust_round(*args, **kw)  # type: ignore[arg-type]
        return {g: RoundLaw(law, r.radius, "learned") for g, r in got.items()}

    monkeypatch.setattr(releaser_module, "robust_round", learned_unstable)
    s = await settings(broker, data_dir, ("releases", "priors"), rule="exact",
                       pairs=["distribution_presence"], epsilon_learn=0.5, budget_total=10.0,
                       learn_min_mass=1.0, release_period_seconds=1.0, learn_period_seconds=1.0)
    async with running(s, {0: partial(0, 4, {"default": [0, 0, 400 * 2**16]})}) as r:
        release = await r.on_clock(r.next_tick())
    assert release is not None and release.priors_seq == 1
    rounds = await read_journal(s, s.topic_priors, PriorsRecord)
    published = {p.group: Distribution.from_points(p.support, p.probs) for p in rounds}
    radii = {p.group: p.radius for p in rounds}
    # the worker calibrates on the laws as every reader of the topic rebuilds them
    assert r.laws == published and r.radii == radii
    plan = release_plan(published, [PairKind.DISTRIBUTION_PRESENCE], Rule.EXACT, 1.0, -2, radii,
                        [0.0, 1.0, 2.0])
    assert release.theta == plan.theta and release.charge == plan.charge()
    # and that theta is the exact one of the published law: the robust audit passes at it and
    # fails just below
    theta, got, radius = release.theta, published["default"], radii["default"]
    assert audit(got, point_zero(), theta, radius, 0.0, [0.0, 1.0, 2.0]).loss <= 1 + 1e-9
    assert audit(got, point_zero(), theta * 0.999, radius, 0.0, [0.0, 1.0, 2.0]).loss > 1


def test_theta_is_a_function_of_the_published_priors_records(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_theta_of_published(broker, tmp_path / "data", monkeypatch))


async def _exhaustion(broker: EmbeddedBroker, data_dir: Path) -> None:
    # bound rule, value_presence on a floored law over {0, 1, 2}: theta 2, charge exactly 1
    s = await settings(broker, data_dir, ("releases", "priors"), rule="bound", epsilon_learn=0.5,
                       budget_total=3.0, release_period_seconds=1.0, learn_period_seconds=1.0,
                       learn_min_mass=0.0)
    async with running(s, {0: partial(0, 4, {"default": [0, 2**16, 0]})}) as r:
        first = await r.on_clock(r.next_tick())  # 0.5 + 1
        second = await r.on_clock(r.next_tick())  # then 0.5 + 1 = 3
        assert first is not None and second is not None and second.epsilon_spent == 3.0
        assert second.tick == first.tick + 1  # type: ignore[operator]
        for _ in range(3):  # the next learning round (0.5) no longer fits: nothing at all
            tick = r.next_tick()
            assert await r.on_clock(tick) is None
            assert r.next_tick() == tick + 1  # skipped for good, not tried again
        assert r.ledger.exhausted and r.metrics.budget_exhausted._value.get() == 1
    rounds = await read_journal(s, s.topic_priors, PriorsRecord)
    releases = await read_journal(s, s.topic_releases, Release)
    assert [p.seq for p in rounds] == [1, 2] and [x.seq for x in releases] == [1, 2]
    assert [p.epsilon_spent for p in rounds] == [0.5, 2.0]
    assert [x.epsilon_spent for x in releases] == [1.5, 3.0]
    assert all(x.charge == 1.0 and x.theta == 2.0 for x in releases)


def test_exhaustion_stops_releases_and_learning(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_exhaustion(broker, tmp_path / "data"))


async def _unrepresentable(broker: EmbeddedBroker, data_dir: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    import pufferfish_core.noise

    s = await settings(broker, data_dir, ("releases",), budget_total=10.0)
    units = 2**53 + 1  # the first grid-unit count a float cannot hold: float() rounds it
    seen: list[object] = []
    noise = {"z": 0}

    def sampler(scale: object) -> int:
        seen.append(scale)
        return noise["z"]

    monkeypatch.setattr(pufferfish_core.noise, "sample_discrete_laplace", sampler)
    async with running(s, {0: partial(0, units - 1), 1: partial(1, 1)}) as r:
        # noisy units 2**53 + 1: refused, never rounded; drawn and charged, so its seq is burned
        assert await r.release_once() is None and len(seen) == 1
        assert r.ledger.last_seq == 1 and r.ledger.accountant.spent == 1.0
        refused = r.metrics.releases_refused.labels(reason="sum_not_representable")
        assert refused._value.get() == 1 and r.metrics.releases._value.get() == 0
        # noisy units 2**53: published exactly (the input was the exact int, not 2**53 rounded)
        noise["z"] = -1
        got = await r.release_once()
        assert got is not None and got.seq == 2 and got.epsilon_spent == 2.0
        assert Fraction(got.noisy_sum) == Fraction(units - 1, 4)  # grid 2**-2
    journal = await read_journal(s, s.topic_releases, Release)
    assert [(x.seq, Fraction(x.noisy_sum)) for x in journal] == [(2, Fraction(units - 1, 4))]


def test_a_sum_past_two_to_the_53_units_is_exact_or_refused(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_unrepresentable(broker, tmp_path / "data", monkeypatch))


async def _failed_round(broker: EmbeddedBroker, data_dir: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    import stream_app.release.ledger as ledger_module

    s = await settings(broker, data_dir, ("releases", "priors"), groups=["a"],
                       default_group="a", epsilon_learn=0.5, budget_total=10.0,
                       learn_min_mass=1e9)
    # a radius above 2 (as priors_file kept it before the clamp): a low_mass round republishes
    # it, and PriorsRecord (radius <= 2) refuses it -- before the charge, so nothing is charged
    wide = PublicPriors(laws={"a": Distribution.from_points([0, 1, 2], [1 / 3] * 3)},
                        default_group="a", radii={"a": 3.0})
    parts = {0: partial(0, 4, {"a": [0, 4, 0]})}
    async with running(s, parts, priors=wide) as r:
        for _ in range(2):  # the retried round fails the same way: still nothing charged
            assert await r.learn_once() is None
            assert r.ledger.accountant.spent == 0.0 and r.ledger.last_priors_seq == 0
        assert r.metrics.learning_rounds._value.get() == 0
    assert await read_journal(s, s.topic_priors, PriorsRecord) == []

    # the local budget file cannot be written: nothing is sent, and the charge is undone
    real = ledger_module.save_state
    broken = {"yes": True}

    def save(path: Path, state: object) -> None:
        if broken["yes"]:
            raise OSError("disk full")
        real(path, state)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger_module, "save_state", save)
    async with running(s, parts) as r:
        assert await r.learn_once() is None and await r.release_once() is None
        assert r.ledger.accountant.spent == 0.0
        assert (r.ledger.last_seq, r.ledger.last_priors_seq) == (0, 0)
        broken["yes"] = False  # the retried tick charges once
        records = await r.learn_once()
        assert records is not None and [x.seq for x in records] == [1]
        assert r.ledger.accountant.spent == 0.5 == records[0].epsilon_spent
        assert records[0].radius <= 2.0
    assert [x.epsilon_spent for x in await read_journal(s, s.topic_priors, PriorsRecord)] == [0.5]
    assert await read_journal(s, s.topic_releases, Release) == []


def test_a_round_that_cannot_be_published_charges_nothing(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_failed_round(broker, tmp_path / "data", monkeypatch))
