"""The demo's processes and tasks: broker, worker subprocess, producer, printers, watchers."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from aiokafka import AIOKafkaProducer

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import BrokerError
from stream_app.demo.demo_plot import plot_run
from stream_app.demo.demo_view import DemoView, Truth, follow
from stream_app.demo.demo_worker import metrics_url, start_demo_worker
from stream_app.demo.population import Event, Population
from stream_app.demo.worker_process import comparison_sd, demo_settings, stop_process_group, tail
from stream_app.kafka.topics import ensure_topics
from stream_app.metrics_page import scrape, totals

PROG = "pufferfish"
WORKER_GRACE_SECONDS = 8.0
STATUS_EVERY_SECONDS = 10.0
MAX_AHEAD = 300  # events the producer may be ahead of the worker (keeps its lag < SETTLE)
METRICS_POLL_SECONDS = 0.25
_say = functools.partial(print, flush=True)


class DemoRun:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop = asyncio.Event()
        self.workdir = Path(tempfile.mkdtemp(prefix="pufferfish-demo-"))
        self.broker: EmbeddedBroker | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.worker_log: IO[bytes] | None = None
        self.metrics_url = ""
        self.sent = 0
        self.started_wall = time.time()
        self.last_ts = 0.0  # event ts: strictly increasing (a unique, ordered time per event)
        self.view = DemoView(args.budget, Truth(None), quiet=args.quiet, say=_say)
        self.failed = False
        self.metrics: dict[str, float] = {}
        self.processed = 0
        self._last_processed: tuple[float, int] | None = None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        started = time.monotonic()
        try:
            settings = await self._start()
            if settings is not None and not self.stop.is_set():
                await self._serve(settings, started)
        except BrokerError as exc:
            _say(f"{PROG}: error: broker: {exc}")
            self.failed = True
        finally:
            await asyncio.get_running_loop().run_in_executor(None, self._shutdown)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        elapsed = time.monotonic() - started
        self.view.pump(final=True)
        _say(f"stopped: sent {self.sent} events in {elapsed:.1f} s "
             f"({self.sent / max(elapsed, 1e-9):.0f} events/s), worker took in {self.processed}, "
             f"{self.view.releases} releases and {self.view.round_records} learning-round "
             "records seen")
        if not self.args.no_plot:
            line, ok = plot_run(self.args.plot, self.view, self.args.budget, self.started_wall)
            _say(line if ok else f"{PROG}: error: {line}")
            self.failed |= not ok
        if self.failed:
            _say(f"logs kept in {self.workdir}")
            return 1
        shutil.rmtree(self.workdir, ignore_errors=True)
        return 0

    # --- start-up -------------------------------------------------------------------------
    async def _start(self) -> Any:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        broker = EmbeddedBroker(log_path=self.workdir / "tansu.log")
        self.broker = broker
        await loop.run_in_executor(None, broker.start)
        if self.stop.is_set():
            return None
        _say(f"broker: embedded tansu on {broker.bootstrap} (pid {broker.pid}, in memory), "
             f"ready in {time.monotonic() - t0:.2f} s")
        settings = demo_settings(self.args, broker.url, self.workdir)
        self.view.independent_sd = comparison_sd(settings, _say)
        await ensure_topics(settings)
        self.worker, self.worker_log, truth_path = start_demo_worker(settings, self.workdir)
        self.view.truth = Truth(truth_path)
        return settings

    # --- running --------------------------------------------------------------------------
    async def _serve(self, settings: Any, started: float) -> None:
        from pufferfish_data.uci import adult_education_num

        values = adult_education_num()
        population = Population([f"user-{i:05d}" for i in range(self.args.users)], values,
                                seed=self.args.seed, groups=settings.groups)
        _say(
            f"producer: replaying UCI adult education-num ({len(values)} rows, domain 1..16) "
            f"as {self.args.users} users joining/leaving, at {self.args.rate:g} events/s"
        )
        self.view.header()
        tasks = [
            asyncio.create_task(self._produce(settings, population)),
            asyncio.create_task(follow(settings.bootstrap, settings.topic_releases,
                                       settings.topic_priors, self.view, self.stop)),
            asyncio.create_task(self._watch(started)),
            asyncio.create_task(self._poll_metrics(settings)),
        ]
        if self.args.duration is not None:
            tasks.append(asyncio.create_task(self._stop_after(self.args.duration)))
        waiter = asyncio.create_task(self.stop.wait())
        done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        self.stop.set()
        for task in [waiter, *tasks]:
            task.cancel()
        results = await asyncio.gather(waiter, *tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                _say(f"{PROG}: error: {type(result).__name__}: {result}")
                self.failed = True

    async def _stop_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        _say(f"duration of {seconds:g} s reached")

    async def _produce(self, settings: Any, population: Population) -> None:
        topics = {"report": settings.topic_reports, "join": settings.topic_membership,
                  "leave": settings.topic_membership}
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, linger_ms=5)
        await producer.start()
        try:
            for join in population.initial_joins(time.monotonic()):
                await self._send(producer, topics[join.kind], join)
            await producer.flush()
            await self._wait_for_joins(len(population.users))
            tokens, last = 0.0, time.monotonic()
            while not self.stop.is_set():
                now = time.monotonic()
                tokens = min(tokens + (now - last) * self.args.rate, self.args.rate * 0.25 + 1)
                last = now
                # Backpressure: never run more than MAX_AHEAD events ahead of the worker, so
                # its view of membership and reports (two topics) stays within SETTLE_SECONDS.
                ahead = self.sent - self.processed
                for _ in range(max(0, min(int(tokens), MAX_AHEAD - ahead))):
                    event = population.next_event(time.monotonic())
                    if event is None:
                        break
                    await self._send(producer, topics[event.kind], event)
                    tokens -= 1
                await asyncio.sleep(0.02)
        finally:
            await producer.stop()

    async def _wait_for_joins(self, expected: int, timeout: float = 90.0) -> None:
        """Reports start once the worker has taken in the joins (it may need ~5 s to start)."""
        _say("waiting for the worker to take in the joins ...")
        deadline = time.monotonic() + timeout
        while not self.stop.is_set() and time.monotonic() < deadline:
            if self.processed >= expected:
                _say("worker is up: reports start")
                return
            await asyncio.sleep(0.2)
        if not self.stop.is_set():
            _say(f"worker has not confirmed the joins after {timeout:g} s; sending reports anyway")

    async def _send(self, producer: AIOKafkaProducer, topic: str, event: Event) -> None:
        self.last_ts = max(time.time(), self.last_ts + 1e-6)
        payload = json.dumps(event.payload(self.last_ts)).encode()
        await producer.send(topic, payload, key=event.user_id.encode())
        self.sent += 1

    async def _poll_metrics(self, settings: Any) -> None:
        """Keeps self.metrics and self.processed (events the worker took in) fresh, once the
        worker said where its /metrics listens (said as `metrics: URL`)."""
        loop = asyncio.get_running_loop()
        while not self.stop.is_set():
            if not self.metrics_url and self.worker is not None:
                self.metrics_url = metrics_url(settings, self.worker.pid, _say)
            metrics = totals(await loop.run_in_executor(None, scrape, self.metrics_url)
                             if self.metrics_url else {})
            if metrics:
                self.metrics = metrics
                self.processed = int(sum(metrics.get(f"pufferfish_events_{outcome}_total", 0)
                                         for outcome in ("applied", "rejected")))
            await asyncio.sleep(METRICS_POLL_SECONDS)

    async def _watch(self, started: float) -> None:
        """Worker liveness, budget exhaustion (/metrics; ends the run), a throughput line."""
        next_status = time.monotonic() + STATUS_EVERY_SECONDS
        while not self.stop.is_set():
            await asyncio.sleep(0.5)
            assert self.worker is not None
            if self.worker.poll() is not None:
                _say(f"{PROG}: error: worker exited with code {self.worker.returncode}")
                for line in tail(self.workdir / "worker.log", 8):
                    _say(f"  worker log: {line}")
                self.failed = True
                return
            if self.metrics.get("pufferfish_budget_exhausted", 0) >= 1:
                _say("budget spent: no more releases; the demo ends")
                await self._show_every_release()  # every release published is printed
                return
            if time.monotonic() >= next_status:
                next_status += STATUS_EVERY_SECONDS
                self._status(started)

    async def _show_every_release(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
                self.view.releases < self.metrics.get("pufferfish_releases_total", 0)):
            await asyncio.sleep(0.2)

    def _status(self, started: float) -> None:
        now = time.monotonic()
        line = f"status: sent {self.sent} events ({self.sent / (now - started):.0f} events/s)"
        if self._last_processed is not None:
            then, before = self._last_processed
            done = self.processed - before
            line += f", worker took in {done} in the last {now - then:.0f} s"
            line += f" ({done / (now - then):.0f} events/s)"
        rejected = self.metrics.get("pufferfish_events_rejected_total", 0)
        line += f", {rejected:.0f} dead-lettered in all"
        self._last_processed = (now, self.processed)
        _say(line)

    # --- shutdown -------------------------------------------------------------------------
    def _shutdown(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            stop_process_group(worker, WORKER_GRACE_SECONDS)
        if self.worker_log is not None:
            self.worker_log.close()
        if self.broker is not None:
            self.broker.stop()
