"""Timing a pipeline that drains a backlog: its counters sampled every 0.25 s, the rate and
the CPU per event read between two marks (counts of handled events)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.harness import Group, Worker
from bench.workload import produce_sync

# (time, handled[, pipeline CPU seconds, broker CPU seconds, input path CPU seconds])
Sample = tuple[float, ...]


def _marks(samples: Sequence[Sample], lo: float, hi: float) -> tuple[Sample, Sample]:
    """The first samples at or above ``lo`` and ``hi`` handled. When one sample crosses both
    marks (a small backlog drained between two samples), the sample before it is the start."""
    i_lo = next(i for i, s in enumerate(samples) if s[1] >= lo)
    i_hi = next(i for i, s in enumerate(samples) if s[1] >= hi)
    if i_hi == i_lo and i_lo > 0:
        i_lo -= 1
    return samples[i_lo], samples[i_hi]


def rate_between(samples: Sequence[Sample], lo: float, hi: float) -> float:
    """Events/s between the first samples at or above ``lo`` and ``hi`` handled."""
    a, b = _marks(samples, lo, hi)
    return (b[1] - a[1]) / max(b[0] - a[0], 1e-9)


def cpu_per_event(samples: Sequence[Sample], lo: float, hi: float, column: int = 2) -> float:
    """CPU microseconds per event between the same marks: the pipeline's processes
    (column 2), the broker's (column 3) or the worker's input path (column 4)."""
    a, b = _marks(samples, lo, hi)
    return (b[column] - a[column]) * 1e6 / max(b[1] - a[1], 1.0)


def drain(
    worker: Worker | Group, start: float, m: int, timeout: float,
    check: Callable[[], None] = lambda: None, broker_cpu: Callable[[], float] = lambda: 0.0,
) -> list[Sample]:
    """Sample (time, handled, CPU seconds, broker CPU seconds, input path CPU seconds) every
    0.25 s until ``start + m`` are handled; ``check`` raises to stop early (a failed
    producer)."""
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout
    while True:
        h, input_cpu = worker.counts()
        samples.append((time.perf_counter(), h, worker.cpu_seconds(), broker_cpu(), input_cpu))
        if h >= start + m:
            return samples
        worker.check_alive()
        check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker handled {h - start:.0f} of {m} in {timeout:g} s")
        time.sleep(0.25)


def produce_and_drain(
    bootstrap: str, topics: dict[str, str], events: Sequence[Any], worker: Worker | Group,
    start: float, timeout: float, broker_cpu: Callable[[], float] = lambda: 0.0,
) -> tuple[list[Sample], float]:
    """Produce ``events`` (in a thread) while sampling the pipeline from the first one on: a
    pipeline faster than the producer drains much of the backlog while it is produced, so
    sampling only afterwards missed the 5 % mark (or both marks: a rate of 0). Returns the
    samples and when the last event was produced (``time.perf_counter``)."""
    failed: list[BaseException] = []
    produced_at: list[float] = []

    def produce_all() -> None:
        try:
            produce_sync(bootstrap, topics, events)
            produced_at.append(time.perf_counter())
        except BaseException as exc:  # noqa: BLE001 - re-raised by the sampling loop
            failed.append(exc)

    def check() -> None:
        if failed:
            raise RuntimeError("producing the backlog failed") from failed[0]

    thread = threading.Thread(target=produce_all, name="backlog-producer", daemon=True)
    thread.start()
    try:
        samples = drain(worker, start, len(events), timeout, check, broker_cpu)
    finally:
        thread.join(timeout)
    check()
    return samples, produced_at[0] if produced_at else time.perf_counter()


def start_mark(samples: Sequence[Sample], produced_at: float, start: float, m: int) -> float:
    """Where a rate is read from: the first sample once the backlog is fully produced (the
    producer no longer competes for the 2 cores), when at least 35 % of the backlog is left
    then; else (a pipeline about as fast as the producer) the 5 % mark."""
    lo = start + 0.05 * m
    after = next((s[1] for s in samples if s[0] >= produced_at), None)
    return max(lo, after) if after is not None and after <= start + 0.65 * m else lo
