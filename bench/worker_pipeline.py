"""The pufferfish worker as a benchmarked pipeline: ``python -m stream_app run`` with the
benchmarks' settings (exact rule, K = 16, one group, releases every second)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness import DOMAIN, PARTITIONS, Worker, start_pipeline
from stream_app.demo.broker import EmbeddedBroker
from stream_app.settings import Settings

WORKER_CMD = ("-m", "stream_app", "run")
# Every pipeline of the throughput benchmark runs with these (the Faust ones read their Faust
# settings from the same variables); the latency benchmark overrides some.
SETTINGS: dict[str, Any] = {
    "domain": list(DOMAIN), "pairs": ["distribution_presence"], "rule": "exact",
    "budget_total": "1e12", "release_period_seconds": "1",
    # learned priors (round 0: uniform on the domain) with no learning round in a run
    "prior_source": "learned", "learn_period_seconds": "86400",
}


def start_worker(
    broker: EmbeddedBroker, workdir: Path, tag: str, run: str = "", index: int = 0,
    **settings: Any,
) -> Worker:
    """The worker with SETTINGS, ``settings`` over them (see harness.start_pipeline)."""
    return start_pipeline(broker, workdir, tag, WORKER_CMD, run, index,
                          **{**SETTINGS, **settings})


def settings_text() -> str:
    """The worker's settings in a run, for the results (defaults read from Settings)."""
    fields = Settings.model_fields
    return (
        f"{PARTITIONS} input partitions, domain K = {len(DOMAIN)}, pairs "
        f"{', '.join(SETTINGS['pairs'])}, rule {SETTINGS['rule']}, one group (learned priors, "
        "uniform round-0 law, no learning round during the run), release every "
        f"{SETTINGS['release_period_seconds']} s, {fields['store'].default.split(':')[0]} store, "
        f"defaults otherwise (batch_max_events {fields['batch_max_events'].default}, "
        f"batch_within_seconds {fields['batch_within_seconds'].default:g}, producer linger "
        f"{fields['producer_linger_seconds'].default:g} s with batching, "
        f"{fields['event_loop'].default})"
    )
