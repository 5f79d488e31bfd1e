"""Per-group releases on UCI adult (``python -m bench utility --by-group``): the value is
``education-num`` (domain 1..16), the group the ``race`` column (5 groups). Every group's law
is declared as its empirical law; the plan is core.group_plan.group_release_plan (what
``pufferfish plan`` prints with release_by_group). Each of R releases draws every group's noisy
sum and count with the product's exact sampler (core.noise, CSPRNG) at the plan's scales. Per
group: the RMSE of the noisy sum against the exact one, next to the plan's sd (pass: within
10 %), and how often the mean's 95 % interval (GroupReleasePlan.mean_interval) holds the exact
mean (pass: >= 94 %).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from bench import _common
from pufferfish_core.distribution import Distribution
from pufferfish_core.group_plan import group_release_plan
from pufferfish_core.noise import discrete_laplace_units, exact_float
from pufferfish_core.vocabulary import PairKind, Rule
from pufferfish_data import load_adult

NAME = "utility"
SECTION = "utility_by_group"
GRID_LOG2 = -10
EPSILON = 1.0
RULE = Rule.EXACT
PAIRS = [PairKind.DISTRIBUTION_PRESENCE]


def noisy(exact: float, theta: float) -> float:
    units = round(exact * 2**-GRID_LOG2)
    out = exact_float(discrete_laplace_units(units, theta, GRID_LOG2), GRID_LOG2)
    assert out is not None
    return out


def run(args: argparse.Namespace, argv: list[str] | None) -> int:
    started = time.perf_counter()
    table = load_adult()
    values = table.int_column("education-num").astype(float)
    groups = table.column("race")
    domain = [float(x) for x in range(1, 17)]
    laws, exact_sum, exact_count = {}, {}, {}
    for g in sorted(set(groups)):
        mine = values[groups == g]
        counts = [float(np.sum(mine == x)) for x in domain]
        laws[g] = Distribution.from_counts(domain, counts)
        exact_sum[g], exact_count[g] = float(mine.sum()), float(mine.size)
    plan = group_release_plan(laws, PAIRS, RULE, EPSILON, GRID_LOG2, None, domain)
    releases = 200 if args.quick else 2000
    rows, ok = [], True
    for g in sorted(laws):
        s = plan.groups[g]
        errors, covered = [], 0
        for _ in range(releases):
            y, c = noisy(exact_sum[g], s.theta_sum), noisy(exact_count[g], s.theta_count)
            errors.append(y - exact_sum[g])
            box = plan.mean_interval(g, y, c)
            covered += box is None or box[0] <= exact_sum[g] / exact_count[g] <= box[1]
        rmse = math.sqrt(float(np.mean(np.square(errors))))
        sd = plan.sum_error_bar(g).noise_sd
        coverage = covered / releases
        ok &= abs(rmse / sd - 1) <= 0.10 and coverage >= 0.94
        rows.append((g, int(exact_count[g]), _common.fmt(s.theta_sum), _common.fmt(sd),
                     _common.fmt(rmse), f"{rmse / sd:.3f}", f"{coverage:.3f}"))
    headers = ("group (race)", "users", "theta_g", "plan sd", "RMSE", "RMSE / sd",
               "mean covered")
    verdict = "yes" if ok else "NO"
    elapsed = time.perf_counter() - started
    print(f"UCI adult education-num by race, distribution_presence, {RULE.value} rule, epsilon "
          f"{EPSILON:g}, {releases} releases; charge per release {plan.charge():.4g}")
    print(_common.text_table(headers, rows))
    print(f"every group: RMSE within 10 % of the plan's sd and mean interval covering >= 94 %: "
          f"{verdict}; {elapsed:.1f} s")
    body = (__doc__.split("\n", 1)[1].strip() + f"\n\n{releases} releases, epsilon {EPSILON:g}, "
            f"rule {RULE.value}, charge per release {plan.charge():.4g} (parallel composition: "
            f"the largest group's). Pass: {verdict}.\n\n"
            + _common.markdown_table(headers, rows) + "\n")
    _common.report(args, SECTION, "4b. Utility per group: RMSE vs plan sd, mean coverage",
                   _common.command_line(NAME, argv), body)
    return 0 if ok else 1
