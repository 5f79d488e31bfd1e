"""The attacker's test: runs on inputs that differ in ONE user's secret publish the
same everything but the noise.

Declared priors: every release field except noisy_sum and ts is identical seq by seq across a
base run and three neighbours (one user more, one user in another group, one user's values
changed), and `pufferfish plan` on the same settings gives the published theta and charge.
Learned priors: the priors topic carries only the noisy laws, and every release's theta is the
one core computes from the priors topic and the settings alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from pufferfish_core.distribution import Distribution
from pufferfish_core.plan import release_plan
from pufferfish_core.vocabulary import PairKind, Rule
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.metrics_page import sample
from tests.kafka_helpers import consume_all, json_values
from tests.reliability.harness import users_changelog
from tests.stream_app.worker_proc import (
    Worker,
    plan_json,
    send,
    start_worker,
    wait_handled,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LAWS = {
    "g1": {"support": [0, 1, 2], "probs": [0.6, 0.3, 0.1]},
    "g2": {"support": [0, 1, 2], "probs": [0.2, 0.3, 0.5]},
    "g3": {"support": [0, 8], "probs": [0.5, 0.5]},
}
DOMAIN = list(range(9))
PAIRS = ["distribution_presence", "distribution_change"]
RELEASES = 4
# the noise, and the clock: the runs start at different times (their ticks are compared below)
NOISE_FIELDS = {"noisy_sum", "ts", "tick"}


def _events(tag: str, variant: str) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """Joins and reports of the base population, changed in one user's secret by `variant`."""
    now = time.time()
    groups = {"u1": "g1", "u2": "g1", "u3": "g2", "u4": "g2", "u5": "g1"}
    values = {"u1": [0, 1], "u2": [2], "u3": [1, 2, 2], "u4": [0], "u5": [1]}
    if variant == "one_more":
        groups["x"], values["x"] = "g3", [8, 8]
    elif variant == "other_group":
        groups["u5"] = "g2"
    elif variant == "other_values":
        values["u5"] = [2, 0, 2]
    joins = [(u, {"user_id": u, "event": "join", "group": g, "ts": now}) for u, g in groups.items()]
    reports = [
        (u, {"user_id": u, "value": v, "report_id": f"{tag}-{u}-{k}", "ts": now + k})
        for u, vs in values.items() for k, v in enumerate(vs)
    ]
    return joins, reports


def _topics(tag: str) -> dict[str, str]:
    return {f"topic_{t}": f"{t}-{tag}" for t in
            ("reports", "membership", "releases", "priors", "deadletter", "partials")}


def _settings(tag: str, priors: Path, **extra: Any) -> dict[str, Any]:
    return {
        "app_id": f"nb-{tag}", **_topics(tag), "input_partitions": "2", "domain": DOMAIN,
        "pairs": PAIRS, "rule": "exact", "epsilon": "0.5", "priors_file": str(priors),
        "release_period_seconds": "0.5", "budget_total": "1000", **extra,
    }


def _releases(bootstrap: str, tag: str, count: int) -> list[dict]:
    def got() -> list[dict]:
        return json_values(asyncio.run(consume_all(bootstrap, f"releases-{tag}", timeout=1.0)))

    wait_until(lambda: len(got()) >= count, 90, f"{count} releases of run {tag}")
    return got()[:count]


@pytest.mark.slow
def test_declared_neighbours_publish_the_same_fields(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps(LAWS))
    variants = ["base", "one_more", "other_group", "other_values"]
    workers: list[Worker] = []
    try:
        for tag in variants:
            asyncio.run(create_topics(broker.bootstrap, {f"reports-{tag}": 2,
                                                          f"membership-{tag}": 2}))
            env = worker_env(broker, tmp_path, **_settings(tag, priors))
            workers.append(start_worker(env, tmp_path, f"w-{tag}"))
        for tag, worker in zip(variants, workers, strict=True):
            joins, reports = _events(tag, tag)
            n = send(broker.bootstrap, f"membership-{tag}", joins)
            wait_handled([worker], n, timeout=90)
            n += send(broker.bootstrap, f"reports-{tag}", reports)
            wait_handled([worker], n, timeout=90)
        runs = {tag: _releases(broker.bootstrap, tag, RELEASES) for tag in variants}
    finally:
        for worker in workers:
            worker.stop()
    base = runs["base"]
    for tag, records in runs.items():
        ticks = [r["tick"] for r in records]  # one release per tick in every run
        assert ticks == list(range(ticks[0], ticks[0] + len(ticks))), tag
        for mine, theirs in zip(records, base, strict=True):
            assert {k: v for k, v in mine.items() if k not in NOISE_FIELDS} == {
                k: v for k, v in theirs.items() if k not in NOISE_FIELDS}, tag
    first = base[0]
    assert first["binding_group"] == "g3" and first["binding_pair"] == "distribution_presence"
    assert first["theta"] == pytest.approx(9.6177, rel=1e-4)  # measured when theta became public
    plan = plan_json(_settings("base", priors), tmp_path)  # what the worker got from its env
    assert plan["theta"] == first["theta"] and plan["charge_per_release"] == first["charge"]
    assert plan["binding_group"] == "g3"


GROUP_NOISE = {"noisy_sum", "noisy_count"}


def _without_noise(record: dict[str, Any]) -> dict[str, Any]:
    """A release without its noisy values: the total's, and every group's sum and count."""
    out = {k: v for k, v in record.items() if k not in NOISE_FIELDS}
    out["groups"] = {g: {k: v for k, v in x.items() if k not in GROUP_NOISE}
                     for g, x in record["groups"].items()}
    return out


@pytest.mark.slow
def test_grouped_neighbours_publish_the_same_fields(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """release_by_group: runs differing in one user's presence, group or values publish, seq by
    seq, the same fields but the noisy values, per group too (every group's scales, sds and
    half-widths, the charge), and the plan's figures; the total is the groups' sum."""
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps(LAWS))
    variants = {"grp-base": "base", "grp-more": "one_more", "grp-group": "other_group",
                "grp-values": "other_values"}
    grouped = {"release_by_group": "true"}
    workers: list[Worker] = []
    try:
        for tag in variants:
            asyncio.run(create_topics(broker.bootstrap, {f"reports-{tag}": 2,
                                                          f"membership-{tag}": 2}))
            env = worker_env(broker, tmp_path, **_settings(tag, priors, **grouped))
            workers.append(start_worker(env, tmp_path, f"w-{tag}"))
        for (tag, variant), worker in zip(variants.items(), workers, strict=True):
            joins, reports = _events(tag, variant)
            n = send(broker.bootstrap, f"membership-{tag}", joins)
            wait_handled([worker], n, timeout=90)
            n += send(broker.bootstrap, f"reports-{tag}", reports)
            wait_handled([worker], n, timeout=90)
        runs = {tag: _releases(broker.bootstrap, tag, RELEASES) for tag in variants}
    finally:
        for worker in workers:
            worker.stop()
    base = runs["grp-base"]
    for tag, records in runs.items():
        for mine, theirs in zip(records, base, strict=True):
            assert set(mine["groups"]) == set(LAWS), tag  # every configured group, always
            assert _without_noise(mine) == _without_noise(theirs), tag
            # the total is the groups' noisy sums added (exact: multiples of the grid)
            assert mine["noisy_sum"] == sum(x["noisy_sum"] for x in mine["groups"].values())
    plan = plan_json(_settings("grp-base", priors, **grouped), tmp_path)["by_group"]
    first = base[0]
    assert first["charge"] == plan["charge_per_release"] and plan["group_secret"]
    for group, got in first["groups"].items():
        row = plan["groups"][group]
        assert (got["theta"], got["noise_sd"], got["ci95_half_width"]) == (
            row["theta_sum"], row["noise_sd_sum"], row["ci95_half_width_sum"]), group
        assert (got["count_theta"], got["count_noise_sd"], got["count_ci95_half_width"]) == (
            row["theta_count"], row["noise_sd_count"], row["ci95_half_width_count"]), group
    assert first["theta"] == max(x["theta"] for x in first["groups"].values())


@pytest.mark.slow
def test_tree_neighbours_publish_the_same_fields(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """release_mechanism=tree (w = 1: changes beyond one per user are held): runs differing in
    one user's values or presence publish, tick by tick, the same fields but the noise,
    including the tree's nodes, node scale and charges."""
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps(LAWS))
    variants = {"tree-base": "base", "tree-values": "other_values", "tree-more": "one_more"}
    tree = {"release_mechanism": "tree", "budget_window_seconds": "30",
            "max_changes_per_window": "1", "budget_total": "3"}
    workers: list[Worker] = []
    try:
        for tag in variants:
            asyncio.run(create_topics(broker.bootstrap, {f"reports-{tag}": 2,
                                                          f"membership-{tag}": 2}))
            env = worker_env(broker, tmp_path, **_settings(tag, priors, **tree),
                             topic_tree_nodes=f"tree-nodes-{tag}")
            workers.append(start_worker(env, tmp_path, f"w-{tag}"))
        for (tag, variant), worker in zip(variants.items(), workers, strict=True):
            joins, reports = _events(tag, variant)
            n = send(broker.bootstrap, f"membership-{tag}", joins)
            wait_handled([worker], n, timeout=90)
            n += send(broker.bootstrap, f"reports-{tag}", reports)
            wait_handled([worker], n, timeout=90)
        done = time.time()  # every run has all its data: compare the ticks due after this
        runs = {tag: [r for r in _releases(broker.bootstrap, tag, 60)
                      if r["tick"] * 0.5 > done + 1] for tag in variants}
        held = {tag: worker_sample(w, "pufferfish_tree_changes_held_total")
                for tag, w in zip(variants, workers, strict=True)}
    finally:
        for worker in workers:
            worker.stop()
    # w 1: u3 reports 1, 2, 2 (the 2 is held once, then the same value again is no change);
    # other_values: u5 reports 2, 0, 2 (0 is held, then 2 is its admitted value again)
    assert held == {"tree-base": 1, "tree-values": 2, "tree-more": 1}
    by_tick = {tag: {r["tick"]: r for r in records} for tag, records in runs.items()}
    common = set.intersection(*(set(ticks) for ticks in by_tick.values()))
    assert len(common) >= 5
    base = by_tick["tree-base"]
    for tag, records in by_tick.items():
        for tick in sorted(common):
            mine, theirs = records[tick], base[tick]
            assert mine["mechanism"] == "tree" and mine["nodes"][0] == "base"
            # seq counts each run's own releases (the runs started at different ticks)
            assert {k: v for k, v in mine.items() if k not in NOISE_FIELDS | {"seq"}} == {
                k: v for k, v in theirs.items() if k not in NOISE_FIELDS | {"seq"}}, (tag, tick)


@pytest.mark.slow
def test_learned_theta_is_recomputed_from_the_priors_topic(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps(LAWS))
    tag = "learned"
    asyncio.run(create_topics(broker.bootstrap, {f"reports-{tag}": 2, f"membership-{tag}": 2}))
    settings = _settings(tag, priors, prior_source="learned", learn_period_seconds="1",
                         epsilon_learn="1", learn_min_mass="1", prior_floor="0.1")
    worker = start_worker(worker_env(broker, tmp_path, **settings), tmp_path, "w")
    try:
        joins, reports = _events(tag, "base")
        # enough members in g1 for its noisy mass to pass the noise tail (~60 users at
        # epsilon_learn 1, 9 bins, beta 1e-6): its rounds publish a learned law and a radius
        many = [f"m{i}" for i in range(150)]
        joins += [(u, {"user_id": u, "event": "join", "group": "g1", "ts": time.time()})
                  for u in many]
        reports += [(u, {"user_id": u, "value": i % 3, "report_id": f"{u}-r", "ts": time.time()})
                    for i, u in enumerate(many)]
        n = send(broker.bootstrap, f"membership-{tag}", joins)
        wait_handled([worker], n, timeout=90)
        n += send(broker.bootstrap, f"reports-{tag}", reports)
        wait_handled([worker], n, timeout=90)

        def rounds() -> list[dict]:
            return json_values(asyncio.run(consume_all(broker.bootstrap, f"priors-{tag}", 1.0)))

        wait_until(lambda: len({r["seq"] for r in rounds()}) >= 3, 90, "3 learning rounds")
        releases = _releases(broker.bootstrap, tag, 8)
        published = rounds()
    finally:
        worker.stop()
    for r in published:
        assert set(r) == {"seq", "ts", "group", "support", "probs", "epsilon_learn",
                          "epsilon_spent", "radius", "status", "window", "tick"}
        # a learned law lives on the domain; a group with too little noisy mass republishes
        # its previous (here: declared) law
        assert r["epsilon_learn"] == 1.0 and set(r["support"]) <= set(DOMAIN)
    assert {r["group"] for r in published} == set(LAWS)
    learned = [r for r in published if r["status"] == "learned"]
    assert learned and all(r["group"] == "g1" and 0 < r["radius"] < 2 for r in learned)
    assert all(r["status"] in ("low_mass", "void") for r in published if r["group"] != "g1")
    assert any(r["priors_seq"] >= 1 for r in releases)
    for release in releases:
        # round 0: the declared laws, exact (the file gives no radius); then the newest
        # published law and radius of each group up to the round the release names
        laws = {g: Distribution.from_points(law["support"], law["probs"])
                for g, law in LAWS.items()}
        radii = {g: 0.0 for g in LAWS}
        newest: dict[str, int] = {}
        for r in published:
            if r["seq"] <= release["priors_seq"] and r["seq"] >= newest.get(r["group"], 0):
                laws[r["group"]] = Distribution.from_points(r["support"], r["probs"])
                radii[r["group"]] = r["radius"]
                newest[r["group"]] = r["seq"]
        plan = release_plan(laws, [PairKind(p) for p in PAIRS], Rule.EXACT, 0.5, -10, radii,
                            [float(x) for x in DOMAIN])
        assert release["theta"] == plan.theta, release
        assert release["charge"] == plan.charge()


def _early_events(now: float, with_i: bool) -> tuple[list[tuple[str, dict]],
                                                     list[tuple[str, dict]], dict[str, int]]:
    """Reports that all come before their users' joins: user i's 3 first (with_i), then 20
    users with 0..4 each; the joins after. Also each user's early report count."""
    early = {"i": 3} if with_i else {}
    early.update({f"u{n}": n % 5 for n in range(20)})
    reports = [(u, {"user_id": u, "value": (len(u) * 7 + ord(u[-1]) + k) % 9,
                    "report_id": f"{u}-{k}", "ts": now + k})
               for u, count in early.items() for k in range(count)]
    joins = [(u, {"user_id": u, "event": "join", "group": "g1", "ts": now + 10})
             for u in early]
    return reports, joins, early


def _hold_run(broker: EmbeddedBroker, tmp_path: Path, tag: str, with_i: bool, per_user: int,
              now: float) -> tuple[dict[str, Any], set[tuple[Any, ...]]]:
    """One worker on the early reports (held or refused before any join), then the joins: the
    other users' states from the users changelog and their dead letters."""
    tmp_path.mkdir()
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps(LAWS))
    asyncio.run(create_topics(broker.bootstrap, {f"reports-{tag}": 2, f"membership-{tag}": 2}))
    settings = _settings(tag, priors, max_held_reports_per_user=str(per_user),
                         deadletter_include_raw="true")  # which reports were refused: raw
    worker = start_worker(worker_env(broker, tmp_path, **settings), tmp_path, f"w-{tag}")
    try:
        reports, joins, early = _early_events(now, with_i)
        held = sum(min(c, per_user) for c in early.values())
        refused = sum(max(0, c - per_user) for c in early.values())
        send(broker.bootstrap, f"reports-{tag}", reports)
        wait_until(lambda: worker_sample(worker, "pufferfish_reports_held") == held and
                   worker_sample(worker, "pufferfish_events_rejected_total",
                                 reason="not_present") == refused,
                   90, f"{held} reports held and {refused} refused in run {tag}")
        n = refused + send(broker.bootstrap, f"membership-{tag}", joins)
        wait_handled([worker], n + held, timeout=90)  # the held reports count at their joins
        # A batch counts as handled before its changelog records and dead letters are
        # acknowledged (run J, tests/README.md: u10's state was not in the changelog yet):
        # read until both show every user present with min(count, bound) reports counted and
        # every refused report (an independent count: a lost state times out here)
        seen: dict[str, Any] = {}

        def written() -> bool:
            seen["states"] = states = users_changelog(broker.bootstrap, f"nb-{tag}")
            seen["letters"] = letters = json_values(asyncio.run(consume_all(
                broker.bootstrap, f"deadletter-{tag}", timeout=1.0)))
            return len(letters) >= refused and all(
                u in states and states[u].get("present") is True
                and sum(states[u]["counts"]) == min(count, per_user)
                for u, count in early.items())

        wait_until(written, 60, f"every state and dead letter of run {tag} written")
        states, letters = seen["states"], seen["letters"]
    finally:
        worker.stop()
    assert set(states) == set(early)
    dead = {(json.loads(d["raw"])["user_id"], json.loads(d["raw"])["report_id"], d["reason"])
            for d in letters}
    assert len(dead) == refused
    # "o": the input offsets a state reflects, which i's records shift; the rest is data
    return ({u: {k: v for k, v in st.items() if k != "o"} for u, st in states.items()
             if u != "i"}, {d for d in dead if d[0] != "i"})


@pytest.mark.slow
def test_one_users_early_reports_never_decide_whether_others_count(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Neighbouring inputs on the real worker: with and without user i's 3 early reports, every
    other user's state in the users changelog (so the exact sum of their contributions) and
    their dead letters are the same, with a per-user bound of 2 (docs/privacy.md, "Reports held
    until a join"). The removed worker-wide bound failed this (issue 35)."""
    per_user, now = 2, time.time()
    with_i = _hold_run(broker, tmp_path / "with", "hold-with", True, per_user, now)
    without_i = _hold_run(broker, tmp_path / "without", "hold-without", False, per_user, now)
    assert with_i == without_i
    # an independent count: each other user holds min(count, 2) reports, all applied at the join
    for user, count in _early_events(now, False)[2].items():
        assert sum(with_i[0][user]["counts"]) == min(count, per_user), user
        assert with_i[0][user]["present"] is True


def worker_sample(worker: Worker, name: str, **labels: str) -> float:
    return sample(worker.samples(), name, labels) or 0.0
