"""`pufferfish demo` end to end: every release is printed next to the exact sum it was drawn
from, and those exact sums agree with an independent replay of the population's events.

The reference is computed here from the raw input records read back from the demo's broker
(not from the demo's or the worker's code): the sum over present users of their latest
reported value (a leave keeps the value, a rejoin brings it back). A release is drawn from
one partial per input partition, each the state after some prefix of that partition's
reports and some prefix of its membership events; the partial's ``newest_ts`` (the demo's
event times are unique and increase with the offset) pins the prefix of the topic it came
from, and the prefix of the other topic is searched downwards from everything older.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from pufferfish_core.vocabulary import PairKind
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics, topic_partitions
from stream_app.demo.demo_worker import ReleaseTap
from stream_app.domain.models import Partial, Release
from stream_app.domain.priors import public_priors
from stream_app.metrics import Metrics
from stream_app.release import Releaser
from stream_app.settings import Settings
from tests.processes import pid_alive
from tests.stream_app.demo.test_demo import _child_pids, _cleanup, _start_demo
from tests.stream_app.worker_proc import noise_bound

RICH = re.compile(
    r"^release seq=(\d+) noisy_sum=(\S+) exact_sum=(\S+) error=(\S+) theta=(\S+) sd=(\S+) "
    r"epsilon_spent=(\S+)/(\S+) priors_seq=(\d+)$", re.MULTILINE,
)
MAX_LAG = 300  # records of the other topic the search may go back (the demo's MAX_AHEAD)
Events = dict[tuple[str, int], list[dict[str, Any]]]  # (topic, partition) -> payloads


async def _read_inputs(bootstrap: str, after: float, timeout: float = 60.0) -> Events:
    """Every input record up to the first of each partition with ts > ``after``."""
    counts = await topic_partitions(bootstrap)
    tps = [TopicPartition(t, p) for t in ("reports", "membership") for p in range(counts[t])]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    out: Events = {(tp.topic, tp.partition): [] for tp in tps}
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while not all(v and v[-1]["ts"] > after for v in out.values()):
            assert time.monotonic() < deadline, "inputs past the releases not read in time"
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                out[(tp.topic, tp.partition)] += [json.loads(r.value or b"") for r in records]
    finally:
        await consumer.stop()
    for key, events in out.items():
        stamps = [e["ts"] for e in events]
        assert stamps == sorted(set(stamps)), f"{key}: event times not unique and increasing"
    return out


def reference(events: list[dict[str, Any]]) -> tuple[int, float]:
    """(sum over present users of their latest value, newest ts of an accepted event)."""
    present: dict[str, bool] = {}
    latest: dict[str, tuple[float, int]] = {}
    newest = 0.0
    for e in sorted(events, key=lambda e: e["ts"]):
        user = e["user_id"]
        if e.get("event") == "join":
            if present.get(user):
                continue  # already_present
            present[user] = True
        elif e.get("event") == "leave":
            if not present.get(user):
                continue  # unknown_user
            present[user] = False
        else:
            if not present.get(user):
                continue  # not_present
            if user not in latest or e["ts"] >= latest[user][0]:
                latest[user] = (e["ts"], int(e["value"]))
        newest = max(newest, e["ts"])
    return sum(v for u, (_, v) in latest.items() if present.get(u)), newest


def _cut_matches(reports: list[dict[str, Any]], membership: list[dict[str, Any]],
                 newest: float, value_sum: int) -> bool:
    if newest == 0.0:
        return value_sum == 0
    for fixed, other in ((reports, membership), (membership, reports)):
        at = [i for i, e in enumerate(fixed) if e["ts"] == newest]
        if not at:
            continue
        older = sum(1 for e in other if e["ts"] < newest)
        for n in range(older, max(older - MAX_LAG, -1), -1):
            if reference(fixed[: at[0] + 1] + other[:n]) == (value_sum, newest):
                return True
        # A partial published right after a rebalance (the worker rebuilt the aggregate from
        # its table: newest_ts is then the newest *report*, membership may be ahead of it).
        for n in range(older + 1, min(older + MAX_LAG, len(other)) + 1):
            if reference(fixed[: at[0] + 1] + other[:n])[0] == value_sum:
                return True
    return False


# --- the tap records the snapshot the release was drawn from (a real Releaser, no Faust) -------

async def _tap_scenario(broker: EmbeddedBroker, data_dir: Path) -> None:
    await create_topics(broker.bootstrap, {"releases": 1, "priors": 1})
    s = Settings(broker=broker.url, domain=(0.0, 1.0, 2.0), epsilon=1.0, grid_log2=-2,
                 metrics_port=None, journal_quiet_seconds=0.3,
                 pairs=(PairKind.VALUE_PRESENCE,),
                 data_dir=data_dir, prior_source="learned", release_period_seconds=1,
                 learn_period_seconds=1, epsilon_learn=1.0)
    reads = 0

    def source() -> dict[int, Partial]:
        """Every read a different sum: k * 10**6 on the k-th read (units of 1/4)."""
        nonlocal reads
        reads += 1
        return {0: Partial(partition=0, sum_units=reads * 4 * 10**6, newest_ts=float(reads),
                           group_units={"default": [0, 0, 0]})}

    out = data_dir / "truth.jsonl"
    with open(out, "w", encoding="utf-8") as f:
        tap = ReleaseTap(f, s.grid_log2)
        r = Releaser(s, Metrics.create(), public_priors(s), lambda: tap.seen(source()),
                     lambda: True)
        tick = tap.wrap(r.on_clock)
        try:
            got = []
            for _ in range(3):
                got.append(await tick(r.next_tick()))
        finally:
            await r.stop()
    releases = [g for g in got if isinstance(g, Release)]
    assert len(releases) == 3 and reads == 6  # each tick: a learning round, then a release
    taps = [json.loads(line) for line in out.read_text().splitlines()]
    for release, t in zip(releases, taps, strict=True):
        k = round(release.noisy_sum / 10**6)  # theta 2: the noise cannot move it by 10**6
        assert k % 2 == 0 and abs(release.noisy_sum - k * 10**6) < 1000
        assert t == {"seq": release.seq, "grid_log2": -2,
                     "partitions": {"0": [k * 4 * 10**6, float(k)]}}


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_tap_records_the_partials_the_release_was_drawn_from(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_tap_scenario(broker, tmp_path))


# --- the whole demo ------------------------------------------------------------------------

def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_demo_exact_sums_match_an_independent_replay(tmp_path: Path) -> None:
    plot = tmp_path / "demo.png"
    proc, out = _start_demo("--mechanism", "independent", "--users", "50", "--rate", "200",
                            "--release-period", "2", "--learn-period", "4", "--plot", str(plot))
    pids: list[int] = []
    try:
        pids = _child_pids(out)
        broker = out.wait_for(r"^broker: embedded tansu on (\S+) ", 1, 60)
        log = out.wait_for(r"^worker: pid \d+, log (\S+)/worker\.log$", 1, 60)
        assert broker and log, out.text
        got = out.wait_for(RICH.pattern, 5, timeout=120)
        assert len(got) >= 5, "timed out after 120 s waiting for 5 releases:\n" + out.text
        changes = out.wait_for(r"^theta (stays \S+|\S+ -> \S+) after learning round seq=\d+",
                               1, 60)
        assert changes, "timed out waiting for a release after a learning round:\n" + out.text
        # every printed release's tap line was written before it was printed
        taps = [json.loads(line) for line in
                (Path(log[0].group(1)) / "truth.jsonl").read_text().splitlines()]
        newest = max(ts for t in taps for _, ts in t["partitions"].values())
        inputs = asyncio.run(_read_inputs(broker[0].group(1), newest))
        assert proc.poll() is None, "demo ended before it could be interrupted:\n" + out.text
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        assert rc == 0, out.text
    finally:
        _cleanup(proc, pids)
    out.drain()
    text = out.text
    for pid in pids:
        assert not pid_alive(pid), f"process {pid} left over:\n{text}"
    assert text.count("exact sum: known only because this demo simulates the users") == 1

    # every release: exact sum, error, sd, budget; noise within a 1e-6 tail bound
    lines = list(RICH.finditer(text))
    assert "exact_sum=n/a" not in text and len(lines) == len(re.findall("^release ", text, re.M))
    for m in lines:
        noisy, exact, error, theta, sd = (float(m[i]) for i in (2, 3, 4, 5, 6))
        assert abs(error - (noisy - exact)) <= 0.011 and math.isclose(sd, theta * 2**0.5,
                                                                      abs_tol=0.006)
        assert abs(noisy - exact) <= noise_bound(theta, len(lines)), m[0]
        assert float(m[8]) == 50 and 0 < float(m[7]) <= 50

    # the exact sums the test could replay: sum of the tapped partials = independent reference
    printed = {int(m[1]): float(m[3]) for m in lines}
    checked = 0
    for tap in taps:
        if tap["seq"] not in printed:
            continue
        units_per_value = 2 ** -tap["grid_log2"]
        total = 0
        for p, (units, newest_p) in tap["partitions"].items():
            assert units % units_per_value == 0
            value_sum = units // units_per_value
            reports, membership = inputs[("reports", int(p))], inputs[("membership", int(p))]
            assert _cut_matches(reports, membership, newest_p, value_sum), (tap, p)
            total += value_sum
        assert printed[tap["seq"]] == total, (tap, printed[tap["seq"]])
        checked += 1
    assert checked >= 5, (checked, taps)

    plot_line = re.search(r"^plot: (\S+) \(noisy vs exact sum", text, re.MULTILINE)
    assert plot_line and Path(plot_line[1]) == plot.resolve(), text
    width, height = _png_size(plot)
    assert 800 <= width <= 2000 and 500 <= height <= 1500 and plot.stat().st_size > 20_000
