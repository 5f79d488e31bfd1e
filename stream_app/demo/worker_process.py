"""The demo's worker subprocess: started with the demo's settings, stopped as a process group."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from stream_app.demo.population import DOMAIN
from stream_app.domain.planning import plan_summary
from stream_app.settings import Settings
from stream_app.settings.load import without_settings

PORTS_FILE = "worker-ports.json"  # in the demo's workdir: where the worker says it listens


def demo_settings(args: argparse.Namespace, broker_url: str, workdir: Path) -> Settings:
    """The demo worker's settings: learned priors, the mechanism and window of the demo's
    arguments (stream_app.demo.demo_defaults), loopback (its metrics on --metrics-port, 0: a
    port the OS picks, written to the ports file), tansu workarounds."""
    return Settings(
        broker=broker_url,
        app_id=f"pufferfish-demo-{os.getpid()}",
        domain=DOMAIN,
        epsilon=args.epsilon,
        budget_total=args.budget,
        release_period_seconds=args.release_period,
        prior_source="learned",
        learn_period_seconds=args.learn_period,
        epsilon_learn=args.epsilon_learn,
        release_mechanism=args.mechanism,
        budget_window_seconds=args.window,
        max_changes_per_window=args.max_changes,
        metrics_host="127.0.0.1",
        metrics_port=args.metrics_port,
        ports_file=workdir / PORTS_FILE,
        web_port=None,
        data_dir=workdir / "worker-data",
        store="memory://",
        # tansu workarounds (docs: shared kafka notes): exact log-end offsets, quick joins
        producer_max_batch_size=1,
        producer_linger_seconds=0.0,
        broker_session_timeout=6,
        broker_rebalance_timeout=6,
        broker_heartbeat_interval=1,
        consumer_fetch_max_wait_seconds=0.1,  # tansu holds idle fetches for the whole wait
    )


def comparison_sd(settings: Settings, say: Callable[[str], None] | None = None) -> float | None:
    """In tree mode, the noise sd of independent releases at the same budget (`pufferfish
    plan`'s noise_sd_independent), which the plot draws beside the tree's, said with the tree's
    in one line; else None."""
    if settings.release_mechanism != "tree":
        return None
    plan = plan_summary(settings)
    sd = plan["noise_sd_independent"]
    if say is not None and sd is not None:
        say(f"release mechanism: tree over privacy windows of {settings.budget_window_seconds:g}"
            f" s, budget {settings.budget_total:g} per window, max_changes_per_window "
            f"{settings.max_changes_per_window}: noise sd {plan['noise_sd']:.4g} per release "
            f"(arity {plan['arity']}); independent releases at the same budget: sd {sd:.4g}")
    return None if sd is None else float(sd)


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the settings as PUFFERFISH_* variables (those set)."""
    env = without_settings()
    for name in settings.model_fields_set:
        value = getattr(settings, name)
        if value is None:
            continue
        env[f"PUFFERFISH_{name.upper()}"] = (
            json.dumps(list(value)) if isinstance(value, tuple) else str(value)
        )
    return env


def stop_process_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return text.rstrip("\n").splitlines()[-lines:]
