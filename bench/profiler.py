"""py-spy on one pipeline process of the throughput benchmark while it drains a further
backlog, and its top frames (by own time, and project frames by inclusive time)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench import _common
from bench.harness import Group
from bench.timing import drain
from bench.workload import Workload, produce_sync
from stream_app.demo.broker import EmbeddedBroker

# The worker's entry point wraps every sample of the main thread: it says nothing.
ENTRY_FRAMES = re.compile(r"\(stream_app/(__main__|cli|faust_adapter/runner)\.py\)$")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")

Frames = list[tuple[str, float]]
Profile = tuple[Frames, Frames, int]  # top own-time frames, top inclusive frames, samples
# Called by run_pipeline once the backlog is drained: (processes, workload, topics, handled
# so far) -> the further events it produced.
Hook = Callable[[Group, Workload, dict[str, str], float], int]


def frame_name(raw: str) -> str:
    m = FRAME.match(raw.strip())
    return f"{m['func']} ({m['file']})" if m else raw.strip()


def top_frames(collapsed: str, n: int = 10) -> Profile:
    """(top own-time frames, top inclusive frames in stream_app/ or core/, samples).

    The inclusive list leaves out the entry point (__main__, cli, runner): it wraps everything.
    """
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = [frame_name(f) for f in stack.split(";")]
        own[frames[-1]] += c
        for f in set(frames):
            if ("stream_app/" in f or "core/" in f) and not ENTRY_FRAMES.search(f):
                incl[f] += c
    pct = 100.0 / max(total, 1)
    return ([(f, c * pct) for f, c in own.most_common(n)],
            [(f, c * pct) for f, c in incl.most_common(n)], total)


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


def profile_worker(
    workdir: Path, broker: EmbeddedBroker, m: int, quick: bool, keep: Path | None,
    rate: int = 100,
) -> tuple[Hook, list[Profile]]:
    """A ``run_pipeline`` hook: py-spy on the pipeline's first process while it drains a
    further M/2 events; the list receives its profile."""
    found: list[Profile] = []

    def hook(group: Group, work: Workload, topics: dict[str, str], done: float) -> int:
        spy = py_spy()
        if spy is None:
            return 0
        extra = work.backlog(max(m // 2, 1))
        out = workdir / "profile.txt"
        prof = subprocess.Popen(
            [spy, "record", "--pid", str(group.workers[0].proc.pid), "--format", "raw",
             "-o", str(out), "-r", str(rate), "--nonblocking", "-d", str(10 if quick else 30)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        produce_sync(broker.bootstrap, topics, extra)
        drain(group, done, len(extra), timeout=240)
        prof.send_signal(signal.SIGINT)  # stop sampling now; py-spy writes the file
        prof.wait(timeout=60)
        if out.exists():
            found.append(top_frames(out.read_text(errors="replace")))
            if keep is not None:
                shutil.copyfile(out, keep)
        return len(extra)

    return hook, found


def report(profile: Profile, pipeline: str, rate: int, m: int) -> str:
    """Print the profile's tables; return its markdown for the results."""
    own, incl, total = profile
    print(f"\npy-spy on {pipeline} ({total} samples at {rate} Hz): top frames by own time")
    print(_common.text_table(("frame", "% samples"), own))
    print("\ntop project frames by inclusive time")
    print(_common.text_table(("frame", "% samples"), incl))
    return (
        f"\n\n**Profile** (py-spy record --nonblocking at {rate} Hz on {pipeline} "
        f"while it drains a further {max(m // 2, 1)} events; {total} samples). Top 10 by "
        "own time:\n\n"
        + _common.markdown_table(("frame", "% samples"), own)
        + "\n\nTop 10 project frames (stream_app/, core/; entry point left out) by "
        "inclusive time:\n\n"
        + _common.markdown_table(("frame", "% samples"), incl)
    )
