"""Prometheus metrics of a worker. Names are a public contract (docs/design.md, deploy/)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from stream_app import __version__
from stream_app.domain.rejection import EVENT_KINDS, IGNORE_REASONS, REJECT_REASONS
from stream_app.released_metrics import RELEASED_METRIC_NAMES, ReleasedValues

# a release drawn and charged but not published (its seq burned): the noisy sum is beyond what
# the JSON float noisy_sum holds exactly (|noisy units| > 2**53)
REFUSE_REASONS = ("sum_not_representable",)

METRIC_NAMES = (
    "pufferfish_events_applied_total",
    "pufferfish_events_rejected_total",
    "pufferfish_releases_total",
    "pufferfish_theta",
    "pufferfish_epsilon_spent",
    "pufferfish_epsilon_remaining",
    "pufferfish_budget_exhausted",
    "pufferfish_recalibration_seconds",
    "pufferfish_release_lag_seconds",
    "pufferfish_release_tick_lateness_seconds",
    "pufferfish_broker_errors_total",
    "pufferfish_learning_rounds_total",
    "pufferfish_priors_seq",
    "pufferfish_budget_window_remaining_seconds",
    "pufferfish_release_charge",
    "pufferfish_releases_refused_total",
    "pufferfish_events_ignored_total",
    "pufferfish_reports_held",
    "pufferfish_reports_held_limit",
    "pufferfish_consumer_seeks_total",
    "pufferfish_input_cpu_seconds_total",
    "pufferfish_tree_changes_held_total",
    "pufferfish_build_info",
    *RELEASED_METRIC_NAMES,
)


class ProcessCount:
    """A count kept where no Metrics is at hand (Faust builds the consumer), shown by every
    Metrics registry of the process (one worker per process outside tests)."""

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


# seeks the worker's consumer made of its own, to fetch records again (faust_consumer.py)
CONSUMER_SEEKS = ProcessCount()


class _ProcessCounter(Collector):
    def __init__(self, name: str, documentation: str, count: ProcessCount) -> None:
        self.name, self.documentation, self.count = name, documentation, count

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.count.value)

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation)


@dataclass
class Metrics:
    """One worker's metrics on its own registry (several workers can live in one test process)."""

    registry: CollectorRegistry
    events_applied: Counter
    events_rejected: Counter
    releases: Counter
    theta: Gauge
    epsilon_spent: Gauge
    epsilon_remaining: Gauge
    budget_exhausted: Gauge
    recalibration_seconds: Histogram
    release_lag_seconds: Histogram
    release_tick_lateness_seconds: Histogram
    broker_errors: Counter
    learning_rounds: Counter
    priors_seq: Gauge
    budget_window_remaining_seconds: Gauge  # registered by show_window: absent without windows
    release_charge: Gauge
    releases_refused: Counter
    events_ignored: Counter
    reports_held: Gauge
    reports_held_limit: Gauge
    input_cpu_seconds: Counter
    tree_changes_held: Counter
    released: ReleasedValues  # the latest published release's values (released_metrics.py)
    window_shown: bool = False

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> Metrics:
        """The worker's metrics, with the standard process, platform and GC collectors. No
        ``_created`` series: a counter's creation time says nothing an operator needs."""
        disable_created_metrics()  # type: ignore[no-untyped-call]
        reg = registry if registry is not None else CollectorRegistry()
        m = cls(
            registry=reg,
            events_applied=Counter(
                "pufferfish_events_applied", "Input events applied to the users' state, by kind "
                "(not those held, ignored or dead-lettered)", ["kind"],
                registry=reg,
            ),
            events_rejected=Counter(
                "pufferfish_events_rejected", "Input records dead-lettered, by reason", ["reason"],
                registry=reg,
            ),
            releases=Counter("pufferfish_releases", "Noisy sums published", registry=reg),
            theta=Gauge("pufferfish_theta", "Current Laplace noise scale theta", registry=reg),
            epsilon_spent=Gauge(
                "pufferfish_epsilon_spent", "Privacy budget spent so far", registry=reg
            ),
            epsilon_remaining=Gauge(
                "pufferfish_epsilon_remaining", "Privacy budget left", registry=reg
            ),
            budget_exhausted=Gauge(
                "pufferfish_budget_exhausted", "1 once the budget refused a release", registry=reg
            ),
            recalibration_seconds=Histogram(
                "pufferfish_recalibration_seconds",
                "Time to recompute theta from the public laws (start-up, each learning round)",
                buckets=(1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 5),
                registry=reg,
            ),
            release_lag_seconds=Histogram(
                "pufferfish_release_lag_seconds",
                "Release publish time minus when a worker consumed the newest record it "
                "includes (worker clocks; none when a release includes nothing new)",
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
                registry=reg,
            ),
            release_tick_lateness_seconds=Histogram(
                "pufferfish_release_tick_lateness_seconds",
                "Release publish time minus its tick's due time (tick x release_period_seconds)",
                buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
                registry=reg,
            ),
            broker_errors=Counter(
                "pufferfish_broker_errors", "Errors talking to the broker", registry=reg
            ),
            learning_rounds=Counter(
                "pufferfish_learning_rounds", "DP learning rounds published to the priors topic",
                registry=reg,
            ),
            priors_seq=Gauge(
                "pufferfish_priors_seq", "Learning round whose laws calibrate theta (0: settings)",
                registry=reg,
            ),
            budget_window_remaining_seconds=Gauge(
                "pufferfish_budget_window_remaining_seconds",
                "Seconds until the privacy window renews the budget", registry=None,
            ),
            release_charge=Gauge(
                "pufferfish_release_charge",
                "Epsilon charged by the latest release (its published charge field)",
                registry=reg,
            ),
            releases_refused=Counter(
                "pufferfish_releases_refused",
                "Releases drawn and charged but not published (seq burned), by reason",
                ["reason"], registry=reg,
            ),
            events_ignored=Counter(
                "pufferfish_events_ignored",
                "Input records neither applied nor dead-lettered (replayed, late_after_leave)",
                ["reason"], registry=reg,
            ),
            reports_held=Gauge(
                "pufferfish_reports_held",
                "Reports held until their user joins (join_grace_seconds), on this worker",
                registry=reg,
            ),
            reports_held_limit=Gauge(
                "pufferfish_reports_held_limit",
                "Bound on held reports: max_held_reports_per_user (scope=user; no bound is "
                "shared across users)", ["scope"], registry=reg,
            ),
            input_cpu_seconds=Counter(
                "pufferfish_input_cpu_seconds",
                "CPU time of the input path's batch engine (records parsed, checked and "
                "applied, users encoded), in the thread that runs it", registry=reg,
            ),
            tree_changes_held=Counter(
                "pufferfish_tree_changes_held",
                "Changes of a user's contribution beyond max_changes_per_window in its window "
                "(release_mechanism=tree): held until the next window", registry=reg,
            ),
            released=ReleasedValues(reg),
        )
        for reason in IGNORE_REASONS:
            m.events_ignored.labels(reason=reason)
        reg.register(_ProcessCounter(
            "pufferfish_consumer_seeks",
            "Seeks the consumer made to fetch records again (gap after a seek, abandoned "
            "hand-off, records dropped by Faust or lost, stream buffer wiped)", CONSUMER_SEEKS))
        for kind in EVENT_KINDS:
            m.events_applied.labels(kind=kind)
        for reason in REJECT_REASONS:
            m.events_rejected.labels(reason=reason)
        for reason in REFUSE_REASONS:
            m.releases_refused.labels(reason=reason)
        Gauge("pufferfish_build_info", "The worker's version (value 1)", ["version"],
              registry=reg).labels(version=__version__).set(1)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        return m

    def show_window(self) -> None:
        """Export the window gauge (privacy windows are on)."""
        if not self.window_shown:
            self.registry.register(self.budget_window_remaining_seconds)
            self.window_shown = True

    def serve(self, host: str = "127.0.0.1", port: int = 9102) -> int:
        """Expose /metrics. Loopback unless the operator binds elsewhere explicitly. Returns
        the port it listens on (for port 0: the one the OS picked)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)
