"""Every metric the dashboard and the alert rules query is one the worker exports."""

from __future__ import annotations

import json

import pytest

from stream_app.metrics import METRIC_NAMES
from tests.deploy.support import (
    DASHBOARD,
    RULES_FILE,
    dashboard_exprs,
    load_yaml,
    metric_types,
    promql_metric_names,
    rule_exprs,
    unresolved_metrics,
)


def test_metric_names_constant_matches_the_registry() -> None:
    # METRIC_NAMES is what deploy/ is checked against, so it must be exactly what Metrics exports.
    assert set(metric_types()) == set(METRIC_NAMES)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('sum by (reason) (rate(pufferfish_events_rejected_total{reason="x"}[5m]))',
         {"pufferfish_events_rejected_total"}),
        ("histogram_quantile(0.9, rate(pufferfish_release_lag_seconds_bucket[1m]))",
         {"pufferfish_release_lag_seconds_bucket"}),
        ('up{job="pufferfish_not_a_metric"} + pufferfish_theta', {"pufferfish_theta"}),
        ("a_pufferfish_theta", set()),
    ],
)
def test_promql_name_extraction(expr: str, expected: set[str]) -> None:
    assert promql_metric_names(expr) == expected


@pytest.mark.parametrize(
    "name",
    [
        "pufferfish_theta_total",              # gauge with a counter suffix
        "pufferfish_events_applied",          # counter without _total
        "pufferfish_theta_bucket",             # gauge is not a histogram
        "pufferfish_releases_total_bucket",
        "pufferfish_epsilon_left",             # not exported at all
    ],
)
def test_resolver_rejects_names_the_app_does_not_export(name: str) -> None:
    assert unresolved_metrics([name]) == {name}


def test_resolver_accepts_histogram_series() -> None:
    names = [f"pufferfish_recalibration_seconds{s}" for s in ("_bucket", "_sum", "_count")]
    assert unresolved_metrics(names) == set()


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = list(dashboard_exprs(dashboard))
    used = set().union(*(promql_metric_names(e) for _, e in exprs))
    assert unresolved_metrics(used) == set(), used
    # What the dashboard is for: theta, budget, events, rejections, lag, recalibration.
    assert {
        "pufferfish_theta",
        "pufferfish_epsilon_spent",
        "pufferfish_epsilon_remaining",
        "pufferfish_events_applied_total",
        "pufferfish_events_rejected_total",
        "pufferfish_release_lag_seconds_bucket",
        "pufferfish_recalibration_seconds_bucket",
    } <= used
    quantile_targets = {
        base for _, e in exprs if "histogram_quantile(" in e
        for base in ("pufferfish_release_lag_seconds", "pufferfish_recalibration_seconds")
        if f"{base}_bucket" in e
    }
    assert quantile_targets == {
        "pufferfish_release_lag_seconds", "pufferfish_recalibration_seconds"}


def test_alert_rules_query_only_exported_metrics() -> None:
    rules = load_yaml(RULES_FILE)
    exprs = dict(rule_exprs(rules))
    used = set().union(*(promql_metric_names(e) for e in exprs.values()))
    assert unresolved_metrics(used) == set(), used
    assert {"PufferfishBudgetNearlyExhausted", "PufferfishWorkerDown",
            "PufferfishDeadLetterRate"} <= set(exprs)
    assert "pufferfish_events_rejected_total" in promql_metric_names(
        exprs["PufferfishDeadLetterRate"])
    assert "pufferfish_epsilon_remaining" in promql_metric_names(
        exprs["PufferfishBudgetNearlyExhausted"])


def _dashboard_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return set().union(*(promql_metric_names(e) for _, e in dashboard_exprs(dashboard)))


def test_the_dashboard_shows_every_metric() -> None:
    """A metric the worker exports and no panel shows is one an operator never sees (a renamed
    metric left behind shows up here, and in the resolver above)."""
    used = _dashboard_names()
    unseen = [n for n in METRIC_NAMES if not any(u == n or u.startswith(f"{n}_") for u in used)]
    assert unseen == []


def test_the_input_counter_is_named_for_what_it_counts() -> None:
    """It counts the events applied to the users' state, not every record read (held, ignored
    and dead-lettered records have their own counters): the name says so, and the dashboard and
    the alert rules moved with it."""
    rules = " ".join(e for _, e in rule_exprs(load_yaml(RULES_FILE)))
    for surface, names in (("METRIC_NAMES", set(METRIC_NAMES)), ("dashboard", _dashboard_names()),
                           ("rules", promql_metric_names(rules))):
        assert "pufferfish_events_applied_total" in names, surface
        assert not any("events_consumed" in n for n in names), surface
