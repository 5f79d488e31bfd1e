"""What the demo prints: each release next to the exact sum it was drawn from, learning rounds,
theta changes; and the history the end-of-run plot is drawn from.

The exact sums come from the worker's truth tap (stream_app.demo.demo_worker: the partials
each release was drawn from, in a local file). A release line waits for its exact sum (it is
written right after the release is sent) at most ``TRUTH_WAIT_SECONDS``; lines keep the
journals' order. ``quiet`` prints the terse lines of stream_app.demo.journal_lines instead.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

# the release history (re-exported: the plot and the tests read it from here)
from stream_app.demo.demo_points import GroupPoint as GroupPoint
from stream_app.demo.demo_points import Point as Point
from stream_app.demo.demo_points import Round as Round
from stream_app.demo.demo_points import laplace_sd as laplace_sd
from stream_app.demo.journal_lines import release_line, round_line
from stream_app.kafka.clients import ISOLATION_LEVEL

TRUTH_WAIT_SECONDS = 10.0
HEADER = (
    "exact sum: known only because this demo simulates the users (read locally from the "
    "worker's state, never published to Kafka or /metrics); error = noisy - exact; "
    "sd = theta*sqrt(2 x draws), the noise's standard deviation (independent: one Laplace "
    "draw; tree: one per node the release adds up, the base and its prefix nodes)"
)


class Truth:
    """Tails the truth file: seq -> exact sum of the partials that release was drawn from."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.sums: dict[int, float] = {}
        self.group_sums: dict[int, dict[str, float]] = {}  # release_by_group
        self._offset = 0

    def poll(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # complete lines only
        self._offset += end
        for line in data[:end].splitlines():
            try:
                doc = json.loads(line)
                units = sum(int(p[0]) for p in doc["partitions"].values())
                step = Fraction(2) ** int(doc["grid_log2"])
                self.sums[int(doc["seq"])] = float(Fraction(units) * step)
                if isinstance(doc.get("groups"), dict):
                    self.group_sums[int(doc["seq"])] = {
                        str(g): float(Fraction(int(u)) * step) for g, u in doc["groups"].items()}
            except (ValueError, KeyError, TypeError, IndexError):
                continue


class DemoView:
    def __init__(self, budget: float, truth: Truth, quiet: bool = False,
                 say: Callable[[str], None] = print, clock: Callable[[], float] | None = None
                 ) -> None:
        self.budget = budget
        self.truth = truth
        self.quiet = quiet
        self.say = say
        self.clock = clock or time.monotonic
        self.points: list[Point] = []
        # noise sd of independent releases at the same budget (`pufferfish plan`
        # noise_sd_independent), drawn beside a tree's for comparison; None: not drawn
        self.independent_sd: float | None = None
        self.rounds: list[Round] = []
        self.releases = 0  # release records read
        self.round_records = 0  # learning-round records read (one per group and round)
        self._queue: deque[tuple[str, Any, float]] = deque()  # (kind, item or line, arrived)
        self._last: Point | None = None

    def header(self) -> None:
        if not self.quiet:
            self.say(HEADER)

    # --- records in -----------------------------------------------------------------------
    def on_release(self, raw: bytes | None) -> None:
        line, ok = release_line(raw)
        self.releases += ok
        if not ok:
            self._queue.append(("line", line, self.clock()))
            return
        r = json.loads(raw or b"")
        point = Point(seq=int(r["seq"]), ts=float(r["ts"]), noisy=float(r["noisy_sum"]),
                      theta=float(r["theta"]), spent=float(r["epsilon_spent"]),
                      priors_seq=int(r["priors_seq"]), draws=_draws(r.get("nodes")),
                      mechanism=str(r.get("mechanism", "independent")))
        if isinstance(r.get("groups"), dict):
            point.groups = {str(g): GroupPoint(float(x["noisy_sum"]), float(x["noise_sd"]))
                            for g, x in r["groups"].items()}
            point.published_sd = float(r["noise_sd"])
        self.points.append(point)
        self._queue.append(("release", (point, line), self.clock()))

    def on_round(self, raw: bytes | None) -> None:
        line, ok = round_line(raw)
        self.round_records += ok
        if ok:
            r = json.loads(raw or b"")
            self.rounds.append(Round(seq=int(r["seq"]), ts=float(r["ts"]), group=str(r["group"]),
                                     status=str(r["status"]), radius=float(r["radius"]),
                                     spent=float(r["epsilon_spent"])))
        self._queue.append(("line", line, self.clock()))

    # --- lines out ------------------------------------------------------------------------
    def pump(self, final: bool = False) -> None:
        """Print what is ready, in order; a release waits for its exact sum (bounded)."""
        self.truth.poll()
        while self._queue:
            kind, item, arrived = self._queue[0]
            if kind == "release" and not self.quiet:
                point, _ = item
                point.exact = self.truth.sums.get(point.seq)
                waited = self.clock() - arrived
                if point.exact is None and not final and waited < TRUTH_WAIT_SECONDS:
                    return
            self._queue.popleft()
            if kind == "line":
                self.say(item)
            else:
                self._release(*item)

    def fill_exact(self) -> None:
        """Exact sums for every release the tap recorded (before plotting)."""
        self.truth.poll()
        for point in self.points:
            if point.exact is None:
                point.exact = self.truth.sums.get(point.seq)
            exact = self.truth.group_sums.get(point.seq, {})
            for group, part in (point.groups or {}).items():
                part.exact = exact.get(group, part.exact)

    def _release(self, point: Point, terse: str) -> None:
        last, self._last = self._last, point
        if self.quiet:
            self.say(terse)
            return
        if last is not None and point.priors_seq != last.priors_seq:
            after = f"after learning round seq={point.priors_seq}"
            if point.theta == last.theta:
                self.say(f"theta stays {point.theta:.4f} {after}")
            else:
                self.say(f"theta {last.theta:.4f} -> {point.theta:.4f} {after} "
                         f"(sd {last.sd:.2f} -> {point.sd:.2f})")
        self.say(rich_release_line(point, self.budget))


def _draws(nodes: Any) -> int:
    """A tree release's draws: its ``nodes`` ids (the base and its prefix nodes); else one."""
    return len(nodes) if isinstance(nodes, list) and nodes else 1


def rich_release_line(point: Point, budget: float) -> str:
    if point.exact is None:
        exact = "exact_sum=n/a error=n/a"
    else:
        exact = f"exact_sum={point.exact:.2f} error={point.noisy - point.exact:+.2f}"
    return (f"release seq={point.seq} noisy_sum={point.noisy:.2f} {exact} "
            f"theta={point.theta:.4f} {_draws_text(point)}sd={point.sd:.2f} "
            f"epsilon_spent={point.spent:.4f}/{budget:g} priors_seq={point.priors_seq}")


def _draws_text(point: Point) -> str:
    return f"draws={point.draws} " if point.mechanism == "tree" else ""


async def follow(bootstrap: str, releases: str, priors: str, view: DemoView,
                 stop: asyncio.Event) -> None:
    """Reads the releases and priors journals from the start into ``view`` until ``stop``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level=ISOLATION_LEVEL)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(releases, 0), TopicPartition(priors, 0)])
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            # journal order: by time; a tick's learning round comes before its release
            got = sorted((r for records in batch.values() for r in records),
                         key=lambda r: (r.timestamp, r.topic != priors))
            for record in got:
                if record.topic == priors:
                    view.on_round(record.value)
                else:
                    view.on_release(record.value)
            view.pump()
    finally:
        await consumer.stop()
