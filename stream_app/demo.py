"""`pufferfish demo`: the whole pipeline on one machine, with nothing to set up.

Starts an embedded broker (tansu, in memory), a worker subprocess, and a producer that replays
the UCI adult `education-num` column (values 1..16) as the reports of a rolling population of
users who join, report, leave and rejoin. Prints every release on one line and serves the
worker's /metrics on 127.0.0.1. Ctrl-C or SIGTERM stops everything cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stream_app.broker import BrokerError, EmbeddedBroker, free_port, port_free
from stream_app.metrics import scrape, totals
from stream_app.topics import ensure_topics

PROG = "pufferfish"
DOMAIN = tuple(float(v) for v in range(1, 17))  # adult education-num: 1..16
WORKER_GRACE_SECONDS = 8.0
STATUS_EVERY_SECONDS = 10.0


# Churn of the rolling population. A user's reports wait SETTLE_SECONDS after its join, and its
# leave SETTLE_SECONDS after its last report: membership and reports are different topics, so
# the worker may see them in either order within a short window.
LEAVE_PROBABILITY = 0.02
SETTLE_SECONDS = 3.0
MAX_AHEAD = 300  # events the producer may be ahead of the worker (keeps its lag < SETTLE)
METRICS_POLL_SECONDS = 0.25
REJOIN_AFTER_SECONDS = (2.0, 10.0)


@dataclass(frozen=True)
class Event:
    kind: str  # "report" | "join" | "leave"
    user_id: str
    value: int | None = None
    report_id: str | None = None

    def payload(self, ts: float) -> dict[str, Any]:
        if self.kind == "report":
            return {"user_id": self.user_id, "value": self.value, "report_id": self.report_id,
                    "ts": ts}
        return {"user_id": self.user_id, "event": self.kind, "ts": ts}


class Population:
    """Users who join, report the data set's values in row order, leave and rejoin.

    Row k of the data set becomes one report by one eligible (present, settled, not leaving)
    user. Times are passed in, so the schedule is testable without waiting.
    """

    def __init__(self, users: Sequence[str], values: np.ndarray, seed: int = 0) -> None:
        if not users or len(values) == 0:
            raise ValueError("need at least one user and one value")
        self.users = list(users)
        self.values = values
        self.row = 0
        self.reports = 0
        self.rng = np.random.default_rng(seed)
        self.present: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.leaving: set[str] = set()
        self._due: list[tuple[float, int, str, str]] = []  # heap: (time, tiebreak, kind, user)
        self._tiebreak = 0

    def initial_joins(self, now: float) -> list[Event]:
        """Everybody joins once at the start (before any report)."""
        events = []
        for user in self.users:
            if user not in self.present:
                events.append(self._apply(Event("join", user), now))
        return events

    def next_event(self, now: float) -> Event | None:
        """The next event at time `now`, or None if no user can report right now."""
        if self._due and self._due[0][0] <= now:
            _, _, kind, user_id = heapq.heappop(self._due)
            return self._apply(Event(kind, user_id), now)
        user = self._pick(now)
        if user is None:
            return None
        value = int(self.values[self.row % len(self.values)])
        self.row += 1
        self.reports += 1
        event = Event("report", user, value=value, report_id=f"r{self.reports}")
        if self.rng.random() < LEAVE_PROBABILITY:
            self.leaving.add(user)
            self._schedule(now + SETTLE_SECONDS, "leave", user)
        return event

    def _pick(self, now: float, tries: int = 32) -> str | None:
        for _ in range(tries):
            user = self.users[int(self.rng.integers(len(self.users)))]
            if user in self.present and user not in self.leaving and self.ready_at[user] <= now:
                return user
        return None

    def _apply(self, event: Event, now: float) -> Event:
        if event.kind == "join":
            self.present.add(event.user_id)
            self.ready_at[event.user_id] = now + SETTLE_SECONDS
        else:
            self.present.discard(event.user_id)
            self.leaving.discard(event.user_id)
            low, high = REJOIN_AFTER_SECONDS
            self._schedule(now + float(self.rng.uniform(low, high)), "join", event.user_id)
        return event

    def _schedule(self, at: float, kind: str, user: str) -> None:
        self._tiebreak += 1
        heapq.heappush(self._due, (at, self._tiebreak, kind, user))


class DemoArgumentError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (design.md: CLI errors)
        raise DemoArgumentError("arguments", message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"{PROG} demo", description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=200, help="size of the user population")
    p.add_argument("--rate", type=float, default=200.0, help="events per second sent (all kinds)")
    p.add_argument(
        "--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)"
    )
    p.add_argument("--epsilon", type=float, default=1.0, help="privacy loss per release")
    p.add_argument("--budget", type=float, default=50.0, help="total privacy budget")
    p.add_argument("--release-period", type=float, default=5.0, help="seconds between releases")
    p.add_argument("--learn-period", type=float, default=10.0,
                   help="seconds between learning rounds (DP estimate of the group's law)")
    p.add_argument("--epsilon-learn", type=float, default=0.5,
                   help="privacy loss per learning round")
    p.add_argument(
        "--metrics-port", type=int, default=9102, help="worker /metrics port on 127.0.0.1 (0: free)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the population's join/leave churn")
    return p


def _check(args: argparse.Namespace) -> None:
    positive = {
        "users": args.users, "rate": args.rate, "epsilon": args.epsilon, "budget": args.budget,
        "release-period": args.release_period, "learn-period": args.learn_period,
        "epsilon-learn": args.epsilon_learn,
    }
    if args.duration is not None:
        positive["duration"] = args.duration
    for name, value in positive.items():
        if not value > 0 or value != value or value == float("inf"):
            raise DemoArgumentError(name, f"must be a finite number > 0, got {value}")
    if not 0 <= args.metrics_port <= 65535:
        raise DemoArgumentError("metrics-port", f"must be in 0..65535, got {args.metrics_port}")
    if args.metrics_port and not port_free(args.metrics_port):
        raise DemoArgumentError(
            "metrics-port", f"127.0.0.1:{args.metrics_port} is in use (0 picks a free port)"
        )


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
        _check(args)
    except DemoArgumentError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_Demo(args).run())
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        return 0


class _Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop = asyncio.Event()
        self.workdir = Path(tempfile.mkdtemp(prefix="pufferfish-demo-"))
        self.broker: EmbeddedBroker | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.worker_log: IO[bytes] | None = None
        self.metrics_url = ""
        self.sent = 0
        self.releases = 0
        self.rounds = 0
        self.budget_announced = False
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
        _say(
            f"stopped: sent {self.sent} events in {elapsed:.1f} s "
            f"({self.sent / max(elapsed, 1e-9):.0f} events/s), worker took in {self.processed}, "
            f"{self.releases} releases and {self.rounds} learning-round records seen"
        )
        if self.failed:
            _say(f"logs kept in {self.workdir}")
            return 1
        shutil.rmtree(self.workdir, ignore_errors=True)
        return 0

    # --- start-up -------------------------------------------------------------------------
    async def _start(self) -> Any:
        from stream_app.settings import Settings

        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        broker = EmbeddedBroker(log_path=self.workdir / "tansu.log")
        self.broker = broker
        await loop.run_in_executor(None, broker.start)
        if self.stop.is_set():
            return None
        _say(
            f"broker: embedded tansu on {broker.bootstrap} (pid {broker.pid}, in memory), "
            f"ready in {time.monotonic() - t0:.2f} s"
        )
        metrics_port = self.args.metrics_port or free_port()
        settings = Settings(
            broker=broker.url,
            app_id=f"pufferfish-demo-{os.getpid()}",
            domain=DOMAIN,
            epsilon=self.args.epsilon,
            budget_total=self.args.budget,
            release_period_seconds=self.args.release_period,
            prior_source="learned",
            learn_period_seconds=self.args.learn_period,
            epsilon_learn=self.args.epsilon_learn,
            metrics_host="127.0.0.1",
            metrics_port=metrics_port,
            web_port=None,
            data_dir=self.workdir / "worker-data",
            store="memory://",
            # tansu workarounds (docs: shared kafka notes): exact log-end offsets, quick joins
            producer_max_batch_size=1,
            broker_session_timeout=6,
            broker_rebalance_timeout=6,
            broker_heartbeat_interval=1,
        )
        await ensure_topics(settings)
        self._start_worker(settings)
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        _say(f"metrics: {self.metrics_url}")
        return settings

    def _start_worker(self, settings: Any) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
        for name in settings.model_fields_set:
            value = getattr(settings, name)
            if value is None:
                continue
            if isinstance(value, tuple):
                env[f"PUFFERFISH_{name.upper()}"] = json.dumps(list(value))
            else:
                env[f"PUFFERFISH_{name.upper()}"] = str(value)
        log_path = self.workdir / "worker.log"
        self.worker_log = open(log_path, "ab")  # noqa: SIM115 - closed in _shutdown
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "stream_app", "run"],
            stdin=subprocess.DEVNULL, stdout=self.worker_log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # Ctrl-C reaches the demo only; the demo stops the worker
        )
        _say(f"worker: pid {self.worker.pid}, log {log_path}")

    # --- running --------------------------------------------------------------------------
    async def _serve(self, settings: Any, started: float) -> None:
        from pufferfish_data.uci import adult_education_num

        values = adult_education_num()
        population = Population(
            [f"user-{i:05d}" for i in range(self.args.users)], values, seed=self.args.seed
        )
        _say(
            f"producer: replaying UCI adult education-num ({len(values)} rows, domain 1..16) "
            f"as {self.args.users} users joining/leaving, at {self.args.rate:g} events/s"
        )
        tasks = [
            asyncio.create_task(self._produce(settings, population)),
            asyncio.create_task(self._print_releases(settings)),
            asyncio.create_task(self._watch(started)),
            asyncio.create_task(self._poll_metrics()),
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
        payload = json.dumps(event.payload(time.time())).encode()
        await producer.send(topic, payload, key=event.user_id.encode())
        self.sent += 1

    async def _print_releases(self, settings: Any) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(settings.topic_releases, 0),
                             TopicPartition(settings.topic_priors, 0)])
            while not self.stop.is_set():
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    for record in records:
                        if tp.topic == settings.topic_priors:
                            self._print_round(record.value)
                        else:
                            self._print_release(record.value)
        finally:
            await consumer.stop()

    def _print_release(self, raw: bytes | None) -> None:
        try:
            r = json.loads(raw or b"")
            line = (
                f"release seq={int(r['seq'])} theta={float(r['theta']):.4f} "
                f"noisy_sum={float(r['noisy_sum']):.2f} priors_seq={int(r['priors_seq'])} "
                f"epsilon_left={float(r['epsilon_remaining']):.4f}"
            )
        except (ValueError, KeyError, TypeError):
            _say("release: (unreadable record skipped)")
            return
        self.releases += 1
        _say(line)

    def _print_round(self, raw: bytes | None) -> None:
        try:
            r = json.loads(raw or b"")
            law = ", ".join(f"{x:g}:{p:.3f}" for x, p in zip(r["support"], r["probs"], strict=True))
            line = (f"learning round seq={int(r['seq'])} group={r['group']} "
                    f"epsilon_learn={float(r['epsilon_learn']):g} law={{{law}}}")
        except (ValueError, KeyError, TypeError):
            _say("learning round: (unreadable record skipped)")
            return
        self.rounds += 1
        _say(line)

    async def _poll_metrics(self) -> None:
        """Keeps self.metrics and self.processed (events the worker took in) fresh."""
        loop = asyncio.get_running_loop()
        while not self.stop.is_set():
            metrics = totals(await loop.run_in_executor(None, scrape, self.metrics_url))
            if metrics:
                self.metrics = metrics
                self.processed = int(
                    metrics.get("pufferfish_events_consumed_total", 0)
                    + metrics.get("pufferfish_events_rejected_total", 0)
                )
            await asyncio.sleep(METRICS_POLL_SECONDS)

    async def _watch(self, started: float) -> None:
        """Worker liveness, budget exhaustion (from /metrics) and a periodic throughput line."""
        next_status = time.monotonic() + STATUS_EVERY_SECONDS
        while not self.stop.is_set():
            await asyncio.sleep(0.5)
            assert self.worker is not None
            if self.worker.poll() is not None:
                _say(f"{PROG}: error: worker exited with code {self.worker.returncode}")
                for line in _tail(self.workdir / "worker.log", 8):
                    _say(f"  worker log: {line}")
                self.failed = True
                return
            exhausted = self.metrics.get("pufferfish_budget_exhausted", 0) >= 1
            if exhausted and not self.budget_announced:
                self.budget_announced = True
                _say("budget exhausted: no more releases; still running until stopped")
            if time.monotonic() >= next_status:
                next_status += STATUS_EVERY_SECONDS
                self._status(started)

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
            _stop_process_group(worker, WORKER_GRACE_SECONDS)
        if self.worker_log is not None:
            self.worker_log.close()
        if self.broker is not None:
            self.broker.stop()


def _stop_process_group(proc: subprocess.Popen[bytes], grace: float) -> None:
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


def _tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return text.rstrip("\n").splitlines()[-lines:]
