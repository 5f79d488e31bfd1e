"""Per-group releases (release_by_group) by the release agent on a real broker, without Faust:
each configured group's sum and count drawn from the partials' exact group totals at the
scales the exact audit accepts, the total as the sum of the groups' noisy sums, one charge
per release, the records byte-for-byte today's when the setting is off."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.learning_radius import RoundLaw, robust_round
from stream_app.demo.broker import EmbeddedBroker
from stream_app.domain.models import Partial, Release
from stream_app.release.journal import read_journal
from tests.kafka_helpers import consume_all, json_values
from tests.oracles import release_noise_sd
from tests.stream_app.release.test_releaser import running, settings

pytestmark = pytest.mark.integration

# declared laws: "narrow" on {0, 1}, "wide" on {0, 2, 4}; distribution_presence, exact rule
LAWS = {"narrow": {"support": [0, 1], "probs": [0.5, 0.5]},
        "wide": {"support": [0, 2, 4], "probs": [0.2, 0.3, 0.5]}}
EPS = 1.0
GRID = 0.25  # grid_log2 -2


def partial(p: int, totals: dict[str, list[int]] | None) -> Partial:
    units = sum(v[0] for v in (totals or {}).values())
    return Partial(partition=p, sum_units=units, group_totals=totals, newest_ts=1.0,
                   consumed_at=1.0)


# exact sums in grid units: narrow 3 users (1 + 1 + 0), wide 2 users (4 + 2) and 1 (0)
PARTS = {0: partial(0, {"narrow": [4, 2], "wide": [16, 1]}),
         1: partial(1, {"narrow": [0, 1], "wide": [8, 2]})}
EXACT = {"narrow": (4, 3), "wide": (24, 3)}  # (sum units, count) summed by hand


def laws_file(tmp: Path) -> Path:
    path = tmp / "laws.json"
    path.write_text(json.dumps(LAWS))
    return path


async def _group_release(broker: EmbeddedBroker, tmp: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    import stream_app.release.group_release as group_module

    draws: list[tuple[int, float, int]] = []
    offsets = iter([5, -3, 7, 2])  # noise units of narrow sum, narrow count, wide sum, count

    def recorded(units: int, theta: float, grid_log2: int) -> int:
        draws.append((units, theta, grid_log2))
        return units + next(offsets)

    monkeypatch.setattr(group_module, "discrete_laplace_units", recorded)
    s = await settings(broker, tmp / "data", ("releases",), domain=[0, 1, 2, 3, 4],
                       prior_source="declared", priors_file=str(laws_file(tmp)),
                       groups=["narrow", "wide"], pairs=["distribution_presence"],
                       rule="exact", epsilon=EPS, budget_total=10.0, release_by_group=True)
    async with running(s, PARTS) as r:
        release = await r.release_once()
        assert release is not None and release.groups is not None
        spent = r.ledger.accountant.spent
        shown = {(m.name, m.labels.get("group")): m.value for f in r.metrics.registry.collect()
                 for m in f.samples if m.name.startswith("pufferfish_released_")}
    # the gauges are the published record's values (the total under group="")
    assert shown == {
        ("pufferfish_released_seq", None): release.seq,
        ("pufferfish_released_sum_noisy", ""): release.noisy_sum,
        ("pufferfish_released_sum_noise_sd", ""): release.noise_sd,
        **{(name, g): getattr(release.groups[g], field) for g in ("narrow", "wide")
           for name, field in (("pufferfish_released_sum_noisy", "noisy_sum"),
                               ("pufferfish_released_sum_noise_sd", "noise_sd"),
                               ("pufferfish_released_count_noisy", "noisy_count"),
                               ("pufferfish_released_count_noise_sd", "count_noise_sd"))}}
    # the exact totals reach the sampler, sums and counts (a count of 3 is 12 grid units)
    assert [d[0] for d in draws] == [4, 12, 24, 12]
    assert {d[2] for d in draws} == {-2}
    theta_n, kappa_n, theta_w, kappa_w = (d[1] for d in draws)
    # every scale passes the exact two-sided audit at epsilon / 2 (sum and count each move)
    # and the sums' fail just below: no more noise than the exact rule needs
    half = EPS / 2
    for law, theta in ((LAWS["narrow"], theta_n), (LAWS["wide"], theta_w)):
        p = Distribution.from_points(law["support"], law["probs"])
        assert audit(p, point_zero(), theta).loss <= half + 1e-9
        assert audit(p, point_zero(), theta * 0.999).loss > half
    for kappa in (kappa_n, kappa_w):
        assert audit(Distribution.point(1.0), point_zero(), kappa).loss <= half + 1e-9
    assert theta_n < theta_w  # the narrow law gets less noise
    g = release.groups
    assert (g["narrow"].noisy_sum, g["narrow"].noisy_count) == ((4 + 5) * GRID, (12 - 3) * GRID)
    assert (g["wide"].noisy_sum, g["wide"].noisy_count) == ((24 + 7) * GRID, (12 + 2) * GRID)
    assert (g["narrow"].theta, g["narrow"].count_theta) == (theta_n, kappa_n)
    # the total is the sum of the groups' noisy sums: no draw of its own
    assert release.noisy_sum == g["narrow"].noisy_sum + g["wide"].noisy_sum
    assert release.noise_sd == pytest.approx(math.sqrt(
        release_noise_sd(theta_n, GRID, 1) ** 2 + release_noise_sd(theta_w, GRID, 1) ** 2),
        rel=1e-12)
    assert g["wide"].noise_sd == pytest.approx(release_noise_sd(theta_w, GRID, 1), rel=1e-12)
    assert g["wide"].count_noise_sd == pytest.approx(release_noise_sd(kappa_w, GRID, 1),
                                                     rel=1e-12)
    # wider than the widest group's own interval, narrower than both added
    assert g["wide"].ci95_half_width < release.ci95_half_width < (
        g["wide"].ci95_half_width + g["narrow"].ci95_half_width)
    assert (release.theta, release.binding_group) == (theta_w, "wide")
    # one charge per release: public membership, the largest group's loss (the exact rule:
    # each coordinate spread / scale, the sum's spread 4 for wide, the count's 1)
    charge = max(EPS, 4 / theta_w + 1 / kappa_w, 1 / theta_n + 1 / kappa_n)
    assert release.charge == pytest.approx(charge, rel=1e-12) and spent == release.charge
    published = json_values(await consume_all(broker.bootstrap, s.topic_releases, 10, 1))
    assert published[0]["groups"]["wide"]["noisy_count"] == 14 * GRID
    assert await read_journal(s, s.topic_releases, Release) == [release]


def test_each_group_drawn_at_its_audited_scale_and_the_total_is_their_sum(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_group_release(broker, tmp_path, monkeypatch))


async def _old_partials_and_off(broker: EmbeddedBroker, tmp: Path) -> None:
    on = await settings(broker, tmp / "on", ("releases",), domain=[0, 1, 2, 3, 4],
                        prior_source="declared", priors_file=str(laws_file(tmp)),
                        groups=["narrow", "wide"], rule="exact", budget_total=10.0,
                        pairs=["distribution_presence"], release_by_group=True)
    older = {0: PARTS[0], 1: partial(1, None)}  # a partial of a worker older than the field
    async with running(on, older) as r:
        assert await r.release_once() is None
        assert r.metrics.registry.get_sample_value("pufferfish_released_sum_noisy",
                                                   {"group": ""}) is None  # nothing published
        assert r.ledger.accountant.spent == 0 and r.ledger.last_seq == 0  # nothing charged
        older[1] = PARTS[1]  # the older worker restarted: its partial is sent again
        assert await r.release_once() is not None
    off = await settings(broker, tmp / "off", ("releases-off",), domain=[0, 1, 2, 3, 4],
                         prior_source="declared", priors_file=str(laws_file(tmp)),
                         groups=["narrow", "wide"], rule="exact", budget_total=10.0,
                         pairs=["distribution_presence"], topic_releases="releases-off")
    async with running(off, PARTS) as r:
        release = await r.release_once()
    assert release is not None and release.groups is None
    raw = (await consume_all(broker.bootstrap, "releases-off", 10, 1))[0].value
    assert raw is not None and b"groups" not in raw
    # today's fields, in today's order
    assert list(json.loads(raw)) == [k for k in Release.model_fields if k != "groups"]


def test_partials_without_group_totals_wait_and_off_publishes_todays_records(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_old_partials_and_off(broker, tmp_path))


async def _learned(broker: EmbeddedBroker, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stream_app.release.learning as learning_module

    learned = {"a": Distribution.from_points([0, 1], [0.5, 0.5]),
               "b": Distribution.from_points([0, 2, 4], [0.2, 0.3, 0.5])}

    def fixed_laws(*args: object, **kw: object) -> dict[str, RoundLaw]:
        got = robust_round(*args, **kw)  # type: ignore[arg-type]
        return {g: RoundLaw(learned[g], 0.0, "learned") for g in got}

    monkeypatch.setattr(learning_module, "robust_round", fixed_laws)
    s = await settings(broker, tmp / "data", ("releases", "priors"), domain=[0, 1, 2, 3, 4],
                       groups=["a", "b"], pairs=["distribution_presence"], rule="exact",
                       epsilon_learn=0.5, budget_total=20.0, learn_min_mass=1.0,
                       release_period_seconds=1.0, learn_period_seconds=2.0,
                       release_by_group=True)
    parts = {0: partial(0, {"a": [4, 2], "b": [16, 1]})}
    async with running(s, parts) as r:
        tick = r.next_tick() | 1  # odd: no round due
        before = await r.on_clock(tick)
        after = await r.on_clock(tick + 1)  # a round first: the learned laws
    assert before is not None and after is not None and after.priors_seq == 1
    assert before.groups is not None and after.groups is not None
    # round 0: uniform laws on the domain, the same theta for both groups; after the round
    # each group's theta is the exact audit's for its learned law at epsilon / 2
    assert before.groups["a"].theta == before.groups["b"].theta
    for g, law in learned.items():
        theta = after.groups[g].theta
        assert audit(law, point_zero(), theta).loss <= 0.5 + 1e-9
        assert audit(law, point_zero(), theta * 0.999).loss > 0.5
    assert after.groups["a"].theta < before.groups["a"].theta


def test_a_learning_round_recalibrates_every_group_on_its_published_law(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_learned(broker, tmp_path, monkeypatch))
