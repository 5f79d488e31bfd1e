"""The demo's worker: ``pufferfish run`` plus a local *truth tap* of each release's exact sum.

Why a tap. A release publishes ``exact + noise`` where ``exact`` is the sum of the latest
per-partition partials the release agent had collected when it drew (stream_app.release,
``combine``). Which partial records those were depends on how far the agent's consumer of
``pufferfish-partials`` had got at that instant, and nothing published tells: reading the
partials topic afterwards, or replaying the simulated events, can only bracket it (the sum
moves every few hundred ms while reports flow). So the demo runs the ordinary worker (same
settings, same code, same ``run_worker``) with one addition: when the public clock's tick
returns a release, the snapshot of partials that release was drawn from is appended, as one
JSON line ``{"seq", "grid_log2", "partitions": {p: [sum_units, newest_ts]}}``, to a file in
the demo's private working directory (mode 0600). The exact sum is thus exactly what the
worker's state held, by construction; tests/stream_app/demo/test_demo_truth.py checks every
partition's sum against an independent replay of the input topics.

Privacy: the tap never writes to Kafka or /metrics; the file lives and dies with the demo's
temporary directory. Only a demo may do this: its operator simulates the users, so the exact
sum is nothing the operator does not already know.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from stream_app.demo.worker_process import settings_env
from stream_app.domain.models import Partial
from stream_app.faust_adapter.ports_file import reported_port
from stream_app.metrics_page import local_url
from stream_app.release.tree_release import partition_units
from stream_app.settings import Settings

if TYPE_CHECKING:
    from stream_app.faust_adapter.worker import PufferfishApp

TRUTH_FILE = "truth.jsonl"
log = logging.getLogger(__name__)
_Snapshot = TypeVar("_Snapshot", bound=Mapping[int, Partial])


def truth_line(seq: int, grid_log2: int, partials: Mapping[int, Partial],
               window: int | None = None) -> str | None:
    """The tap's line; ``window``: a tree release, whose exact sum is each partition's admitted
    contributions in that window (stream_app.release.tree_release.partition_units; None when a
    partition cannot tell it: the releaser then repeats the window's last exact sum)."""
    parts: dict[str, list[Any]] = {}
    for p, x in sorted(partials.items()):
        units = x.sum_units if window is None else partition_units(x, window)
        if units is None:
            return None
        parts[str(p)] = [units, x.newest_ts]
    doc: dict[str, Any] = {"seq": seq, "grid_log2": grid_log2, "partitions": parts}
    if window is None and all(x.group_totals is not None for x in partials.values()):
        groups: dict[str, int] = {}  # release_by_group: each group's exact sum, in units
        for x in partials.values():
            for g, (units_g, _) in (x.group_totals or {}).items():
                groups[g] = groups.get(g, 0) + units_g
        doc["groups"] = groups
    return json.dumps(doc) + "\n"


class ReleaseTap:
    """Writes, for each release of a tick, the partials snapshot it was drawn from.

    The release agent reads its partials source once per learning round and once per release,
    each right before its draw (``release.learning.learn`` / ``Releaser._release``); ticks
    never overlap (the agent's lock). So when a tick returns a release, the last snapshot read
    during that tick is the release's. ``seen`` wraps the source, ``wrap`` the tick
    (``Releaser.on_clock``).
    """

    def __init__(self, out: IO[str], grid_log2: int) -> None:
        self.out = out
        self.grid_log2 = grid_log2
        self.snapshots: list[Mapping[int, Partial]] = []

    def seen(self, snapshot: _Snapshot) -> _Snapshot:
        self.snapshots.append(snapshot)
        return snapshot

    def wrap(self, on_clock: Callable[[int], Awaitable[Any]]
             ) -> Callable[[int], Awaitable[Any]]:
        async def tapped_on_clock(tick: int) -> Any:
            self.snapshots.clear()
            record = await on_clock(tick)
            if record is not None and self.snapshots:
                window = record.window if record.mechanism == "tree" else None
                line = truth_line(record.seq, self.grid_log2, self.snapshots[-1], window)
                try:
                    if line is not None:
                        self.out.write(line)
                        self.out.flush()
                except OSError as exc:  # the demo prints exact_sum=n/a; the worker goes on
                    log.warning("truth tap not written (%s)", type(exc).__name__)
            return record

        return tapped_on_clock


def _tapped_app_class(tap: ReleaseTap) -> type[PufferfishApp]:
    from stream_app.faust_adapter.worker import PufferfishApp

    class TappedApp(PufferfishApp):
        """PufferfishApp whose release ticks go through the tap."""

        def __init__(self, settings: Settings, metrics: Any = None) -> None:
            super().__init__(settings, metrics)
            self.releaser.on_clock = tap.wrap(  # type: ignore[method-assign,assignment]
                self.releaser.on_clock)

        def latest_partials(self) -> dict[int, Partial]:
            return tap.seen(super().latest_partials())

    return TappedApp


def start_demo_worker(
    settings: Settings, workdir: Path
) -> tuple[subprocess.Popen[bytes], IO[bytes], Path]:
    """This module as a subprocess with the settings as PUFFERFISH_* variables; its log file
    and the truth file it appends to."""
    env = settings_env(settings)
    truth_path = workdir / TRUTH_FILE
    os.close(os.open(truth_path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
    log_path = workdir / "worker.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the caller closes it
    proc = subprocess.Popen(
        [sys.executable, "-m", "stream_app.demo.demo_worker", str(truth_path)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        start_new_session=True,  # Ctrl-C reaches the demo only; the demo stops the worker
    )
    print(f"worker: pid {proc.pid}, log {log_path}", flush=True)
    return proc, log, truth_path


def metrics_url(settings: Settings, pid: int, say: Callable[[str], None]) -> str:
    """The /metrics URL of worker ``pid`` once its ports file names the port (said as
    ``metrics: URL``), else ""."""
    assert settings.ports_file is not None
    port = reported_port(settings.ports_file, "metrics", pid)
    if port is None:
        return ""
    say(f"metrics: {local_url(port)}")
    return local_url(port)


def main(argv: list[str]) -> int:
    import stream_app.faust_adapter.worker
    from stream_app.faust_adapter.runner import run_worker
    from stream_app.settings import load_settings

    settings = load_settings()
    with open(argv[0], "a", encoding="utf-8") as truth:
        # run_worker builds stream_app.faust_adapter.worker.PufferfishApp: the tapped one
        tap = ReleaseTap(truth, settings.grid_log2)
        stream_app.faust_adapter.worker.PufferfishApp = _tapped_app_class(tap)  # type: ignore[misc]
        try:
            return run_worker(settings)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
