"""The shipped deployments keep publishing: `pufferfish plan --json` on the exact environment of
each manifest (docker-compose.yml's worker, the k8s ConfigMap + example Secret, over the image's
ENV) has a privacy window, and the budget lasts the whole window at the shipped release period.

Without a window the budget is one budget for the deployment's life: once spent, nothing is ever
published again (the deployments shipped before had budget 50 for 99 releases, 990 s).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY_README, compose_worker_env, k8s_worker_env, plan_json

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_budget_window")

MANIFESTS = {"docker-compose.yml": compose_worker_env, "deploy/k8s": k8s_worker_env}
# the heading of each manifest's plan in deploy/README.md
README_SECTIONS = {"docker-compose.yml": "### `docker-compose.yml`", "deploy/k8s": "### `k8s/`"}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {name: plan_json(env(), tmp_path_factory.mktemp("plan")) for name, env in
            MANIFESTS.items()}


def budget_problems(plan: dict[str, Any]) -> list[str]:
    """Why this plan goes silent before its window ends (empty: it does not)."""
    window = plan["window"]
    if window is None:
        return [f"no privacy window (budget_window_seconds): the budget {plan['budget_total']:g} "
                f"runs out after {plan['releases_until_exhausted']} releases, "
                f"{plan['seconds_until_exhausted']:g} s, and nothing is published after"]
    problems = []
    ticks = window["ticks_per_window"]
    if window["runs_out_before_window_end"] or window["releases_per_window"] < ticks:
        problems.append(f"the budget lasts {window['budget_lasts_seconds']:g} s of each "
                        f"{window['seconds']:g} s window: {window['releases_per_window']} of "
                        f"{ticks} ticks release")
    if window["budget_lasts_seconds"] < ticks * plan["release_period_seconds"]:
        problems.append(f"the last release is at {window['budget_lasts_seconds']:g} s")
    learning = plan["learning"]
    # the releases' charge per window: the tree's once, or every tick's
    releases = (plan["window_charge"] if plan["release_mechanism"] == "tree" else
                ticks * plan["charge_per_release"])
    # the most rounds of any window (windows and the learning clock are the epoch's)
    rounds = 0 if learning is None else window["learning_rounds_per_window"]
    needed = releases + (0 if learning is None else rounds * learning["epsilon_learn"])
    if needed > plan["budget_total"] * (1 + 1e-12):
        problems.append(f"{ticks} releases charged {releases:g} and {rounds} learning rounds "
                        f"need {needed:g} > budget_total {plan['budget_total']:g}")
    return problems


def daily_loss(plan: dict[str, Any]) -> float:
    """budget_total x the windows of a UTC day (windows that divide a day evenly; a window
    without: the whole life's budget)."""
    window = plan["window"]
    if window is None:
        return float(plan["budget_total"])
    per_day = 86_400 / window["seconds"]
    assert per_day == int(per_day), "a shipped window divides a day"
    return plan["budget_total"] * per_day


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_the_budget_lasts_the_privacy_window(
    plans: dict[str, dict[str, Any]], manifest: str
) -> None:
    assert budget_problems(plans[manifest]) == [], manifest


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_the_loss_per_day_is_at_most_ten(plans: dict[str, dict[str, Any]], manifest: str) -> None:
    # issue 36: a total a reviewer would accept; the shipped deployments use the tree for it
    plan = plans[manifest]
    assert daily_loss(plan) <= 10, manifest
    assert plan["loss_per_day"]["loss"] == pytest.approx(daily_loss(plan))
    assert plan["release_mechanism"] == "tree"
    # the old settings (1 h windows of 182): 4,368 per day, refused
    assert daily_loss({**plan, "budget_total": 182.0, "window": {"seconds": 3600}}) == 4368


def test_the_check_fails_without_a_window_or_with_too_small_a_budget(
    plans: dict[str, dict[str, Any]],
) -> None:
    # The deployments as shipped before: budget 50, no window (99 releases, 990 s).
    silent = {**plans["docker-compose.yml"], "window": None, "budget_total": 50.0,
              "releases_until_exhausted": 99, "seconds_until_exhausted": 990.0}
    assert "no privacy window" in budget_problems(silent)[0]
    plan = plans["docker-compose.yml"]
    window = plan["window"]
    short = {**plan, "window": {**window, "releases_per_window": window["ticks_per_window"] - 1,
                                "runs_out_before_window_end": True}}
    assert budget_problems(short)
    # enough for the tree but half a learning round short
    learning = plan["learning"]
    tight = plan["window_charge"] + (
        window["learning_rounds_per_window"] - 0.5) * learning["epsilon_learn"]
    assert budget_problems({**plan, "budget_total": tight})
    # independent releases of 0.5 at every tick of the day: far beyond 10
    assert budget_problems({**plan, "release_mechanism": "independent",
                            "charge_per_release": 0.5})


def test_both_deployments_plan_the_same(plans: dict[str, dict[str, Any]]) -> None:
    # One privacy configuration, two ways to run it: deploy/README.md shows both plans.
    keys = ("theta", "charge_per_release", "budget_total", "release_period_seconds", "window",
            "learning", "failure_probability", "release_mechanism", "max_changes_per_window",
            "noise_sd", "noise_sd_independent", "loss_per_day")
    compose, k8s = plans["docker-compose.yml"], plans["deploy/k8s"]
    assert {k: compose[k] for k in keys} == {k: k8s[k] for k in keys}


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_the_plan_reads_the_manifest_environment(
    plans: dict[str, dict[str, Any]], manifest: str
) -> None:
    # The environment really reaches the plan (not the defaults): the shipped settings.
    env, plan = MANIFESTS[manifest](), plans[manifest]
    assert plan["epsilon"] == float(env["PUFFERFISH_EPSILON"])
    assert plan["rule"] == env["PUFFERFISH_RULE"]
    assert plan["budget_total"] == float(env["PUFFERFISH_BUDGET_TOTAL"])


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_deploy_readme_shows_the_current_plan(
    plans: dict[str, dict[str, Any]], manifest: str
) -> None:
    # deploy/README.md pastes `pufferfish plan` of each manifest: its figures must be today's
    # (regenerate the block with the command the README gives when this fails).
    plan, window = plans[manifest], plans[manifest]["window"]
    readme = DEPLOY_README.read_text(encoding="utf-8")
    section = readme.split(README_SECTIONS[manifest], 1)[1].split("\n## ", 1)[0]
    section = section.split("\n### ", 1)[0]
    expected = [
        f"budget {plan['budget_total']:g}: {plan['releases_until_exhausted']} releases, "
        f"{plan['seconds_until_exhausted']:g} s at one per {plan['release_period_seconds']:g} s",
        f"privacy window {window['seconds']:g} s",
        f"{window['releases_per_window']} of {window['ticks_per_window']} ticks release",
        f"charge per window {plan['window_charge']:.6g}",
        f"noise standard deviation {plan['noise_sd']:.6g} per release (release mechanism tree",
        f"noise sd {plan['noise_sd_tree']:.6g} tree (max_changes_per_window "
        f"{plan['max_changes_per_window']}), {plan['noise_sd_independent']:.6g} independent",
        f"loss per day: at most {plan['loss_per_day']['loss']:.6g}",
        f"theta {plan['theta']:.6g}",
        f"noisy group mass above {plan['learning']['noise_tail_users']:.4g} users",
    ]
    missing = [line for line in expected if line not in section]
    assert not missing, f"deploy/README.md, {README_SECTIONS[manifest]}: stale plan {missing}"


def test_deploy_readme_states_the_learning_population(plans: dict[str, dict[str, Any]]) -> None:
    # A learning round's law is void unless the group's noisy mass exceeds the noise tail T.
    tail = plans["docker-compose.yml"]["learning"]["noise_tail_users"]
    readme = DEPLOY_README.read_text(encoding="utf-8")
    assert f"noisy mass exceeds {tail:.2f} users" in readme
    assert f"about **{math.ceil(tail)} users**" in readme
    assert f"Learned priors need about {math.ceil(tail)} users per group" in readme


def test_deploy_readme_states_the_noise_for_ten_thousand_users(
    plans: dict[str, dict[str, Any]],
) -> None:
    # values of mean 2.5 over 10,000 users: an exact sum of 25,000
    plan = plans["docker-compose.yml"]
    readme = DEPLOY_README.read_text(encoding="utf-8")
    assert f"**Noise per release: sd {plan['noise_sd']:.1f}**" in readme
    assert f"**{100 * plan['noise_sd'] / 25_000:.2f} %** of the sum" in readme
    assert f"{100 * plan['noise_sd_independent'] / 25_000:.0f} %" in readme
    assert f"**Loss per day: at most {plan['loss_per_day']['loss']:g}**" in readme
