"""Run the real worker (`python -m stream_app run`) as a subprocess against a real broker.

Everything here is loopback-only and bounded in time. Logs go to files so a test can scan every
byte the worker printed (the leak tests) and so a failure shows what happened.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stream_app.demo.broker_admin import create_topics, topic_partitions
from stream_app.faust_adapter.ports_file import reported_port
from stream_app.metrics_page import Samples, fetch, local_url, sample, scrape
from tests.kafka_broker import KafkaBroker
from tests.kafka_helpers import consume_all, read_to_end
from tests.ports import worker_port
from tests.processes import task_dump
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"

# The workloads' users report ~12 times per second: a replay after a crash or rebalance can
# reach ~60 reports of one user, near the default window (64; docs/design.md, "Throughput"), so
# these workers remember more ids (the default is exercised by the stream_app tests).
WORKLOAD_SETTINGS = {"PUFFERFISH_DEDUP_WINDOW": "256"}

# tansu workarounds (/work/shared/kafka.md, docs/operations.md "Broker workarounds for tansu"):
# exact end offsets (one-record batches), quick group joins, idle fetches not held.
TANSU_COMPAT = {
    "PUFFERFISH_PRODUCER_MAX_BATCH_SIZE": "1",
    "PUFFERFISH_PRODUCER_LINGER_SECONDS": "0",
    "PUFFERFISH_BROKER_SESSION_TIMEOUT": "6",
    "PUFFERFISH_BROKER_REBALANCE_TIMEOUT": "6",
    "PUFFERFISH_BROKER_HEARTBEAT_INTERVAL": "1",
    "PUFFERFISH_CONSUMER_FETCH_MAX_WAIT_SECONDS": "0.1",
    **WORKLOAD_SETTINGS,
}

# Apache Kafka needs none of tansu's workarounds (docs/operations.md, "A real Kafka"): the
# worker's defaults for batching, fetch wait and rebalance timeout; only the group's session
# timeout at Kafka's minimum (group.min.session.timeout.ms, 6 s) and a heartbeat a sixth of it,
# so that a SIGKILLed member's partitions move within seconds (the default is a minute).
KAFKA_COMPAT = {
    "PUFFERFISH_BROKER_SESSION_TIMEOUT": "6",
    "PUFFERFISH_BROKER_HEARTBEAT_INTERVAL": "1",
    **WORKLOAD_SETTINGS,
}


# The brokers of `each_broker` (tests/reliability/conftest.py), as pytest parameters: Kafka's
# cases in xdist_group("kafka"), one process and one Kafka for them all.
# (xdist joins every group an item is marked with: a module with a group of its own puts its
# Kafka cases in another group, and another process starts another Kafka; a parameter list of
# tuples carries the mark on each tuple: `on_brokers`)
KAFKA_GROUP = pytest.mark.xdist_group("kafka")
TANSU = pytest.param("tansu", id="tansu")
KAFKA = pytest.param("kafka", id="kafka", marks=KAFKA_GROUP)
BROKERS = (TANSU, KAFKA)


def on_brokers(*cases: tuple[str, str]) -> list[Any]:
    """(store, broker) pairs as the parameters of ("store", "each_broker") with
    ``indirect=["each_broker"]``, each Kafka pair in xdist_group("kafka"); ids "memory-kafka"."""
    return [pytest.param(store, broker, id=f"{store.split(':')[0]}-{broker}",
                         marks=KAFKA_GROUP if broker == "kafka" else ())
            for store, broker in cases]


class Broker(Protocol):
    """What a scenario needs of a test broker (tansu's EmbeddedBroker, KafkaBroker,
    NoidaBroker)."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def url(self) -> str: ...


def compat_for(broker: object) -> dict[str, str]:
    """The test settings a broker needs: Kafka's for Apache Kafka, tansu's for the look-alikes
    (noida-db's log-end offsets are right, but its groups are slow to settle like tansu's)."""
    return dict(KAFKA_COMPAT if isinstance(broker, KafkaBroker) else TANSU_COMPAT)


# topic role -> partitions (None: the input partition count); names are "<prefix>-<role>"
# Every topic the worker uses, so each test has its own (a shared default `priors` topic
# was auto-created with the broker's default of 4 partitions after the outage test's
# broker restart, before the worker could create it with 1).
TOPIC_ROLES: dict[str, int | None] = {
    "reports": None, "membership": None, "releases": 1, "priors": 1, "deadletter": 1,
    "partials": 1,
}


@dataclass
class Topics:
    """A fresh, unique topic set (several tests share one broker)."""

    prefix: str = field(default_factory=lambda: f"rel-{uuid.uuid4().hex[:8]}")
    partitions: int = 2
    reports: str = field(init=False)
    membership: str = field(init=False)
    releases: str = field(init=False)
    priors: str = field(init=False)
    deadletter: str = field(init=False)
    partials: str = field(init=False)
    app_id: str = field(init=False)

    def __post_init__(self) -> None:
        for role in TOPIC_ROLES:
            setattr(self, role, f"{self.prefix}-{role}")
        self.app_id = f"{self.prefix}-app"

    def create_map(self) -> dict[str, int]:
        return {getattr(self, role): n or self.partitions for role, n in TOPIC_ROLES.items()}

    def env(self) -> dict[str, str]:
        env = {f"PUFFERFISH_TOPIC_{role.upper()}": getattr(self, role) for role in TOPIC_ROLES}
        env["PUFFERFISH_APP_ID"] = self.app_id
        env["PUFFERFISH_INPUT_PARTITIONS"] = str(self.partitions)
        return env


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def create(bootstrap: str, topics: Topics) -> None:
    run(create_topics(bootstrap, topics.create_map()))


def new_topics(bootstrap: str, partitions: int = 2) -> Topics:
    """A fresh topic set, created on the broker."""
    topics = Topics(partitions=partitions)
    create(bootstrap, topics)
    return topics


# epsilon = 1e6 per release makes theta <= 5e-6: the discrete Laplace noise on the 2**-10 grid
# is 0 except with probability ~e^-200, so a release shows the exact running sum (checked
# within laplace_bound(theta)); the budget never runs out.
EXACT_SUM_SETTINGS = {
    "PUFFERFISH_EPSILON": "1000000",
    "PUFFERFISH_BUDGET_TOTAL": "1e12",
    "PUFFERFISH_RELEASE_PERIOD_SECONDS": "0.5",
    "PUFFERFISH_LOG_LEVEL": "info",
}


# The table stores a worker runs on (docs/operations.md, "State on disk"): the restart, crash,
# rebalance and lost-write tests run on both (`@pytest.mark.parametrize("store", STORES)`).
STORES = ("memory://", "rocksdb://")


def worker_env(
    broker_url: str, topics: Topics, data_dir: Path, overrides: Mapping[str, str] | None = None,
    store: str = "memory://", compat: Mapping[str, str] = TANSU_COMPAT,
) -> dict[str, str]:
    """Env for one worker: the broker's compat knobs (`compat_for(broker)`; tansu's by
    default), unique topics, metrics and web servers on ports the OS picks (Worker reads them
    from its ports file), the table store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update(compat)
    env.update(topics.env())
    env.update({
        "PUFFERFISH_BROKER": broker_url,
        "PUFFERFISH_DATA_DIR": str(data_dir),
        "PUFFERFISH_METRICS_PORT": "0",
        "PUFFERFISH_WEB_PORT": "0",
        "PUFFERFISH_DOMAIN": "[0, 1, 2, 3, 4, 5]",
        "PUFFERFISH_PAIRS": '["value_presence"]',
        "PUFFERFISH_PRIOR_SOURCE": "learned",
        # no learning round (it would charge the budget) unless a test asks for one
        "PUFFERFISH_LEARN_PERIOD_SECONDS": "86400",
        "PUFFERFISH_AUTO_JOIN": "false",
        "PUFFERFISH_MAX_PAYLOAD_BYTES": "4096",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(REPO),
        "PUFFERFISH_STORE": store,
    })
    if overrides:
        env.update(overrides)
    return env


class Worker:
    """One `python -m stream_app run` subprocess with its output captured in files and the
    ports it listens on in <name>.ports.json (tests/ports.py)."""

    entry: tuple[str, ...] = ("-m", "stream_app", "run")  # what follows `python`

    def __init__(self, env: Mapping[str, str], log_dir: Path, name: str,
                 argv: Sequence[str] = ()) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        self.ports_file = log_dir / f"{name}.ports.json"
        self.env = {**env, "PUFFERFISH_PORTS_FILE": str(self.ports_file)}
        self.argv = list(argv)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}  # read from ports_file, for this process

    @property
    def metrics_port(self) -> int:
        """The port of its /metrics (waits until the worker reports it)."""
        return self.port("metrics")

    @property
    def web_port(self) -> int:
        """The port of its Faust web server (waits until the worker reports it)."""
        return self.port("web")

    def port(self, server: str) -> int:
        if server not in self.ports:
            assert self.proc is not None, f"{self.name} was not started"
            self.ports[server] = worker_port(self.ports_file, server, self.proc, self.tail)
        return self.ports[server]

    def reported_port(self, server: str) -> int | None:
        """The port `server` listens on, None while the worker has not reported it."""
        if server not in self.ports and self.proc is not None:
            port = reported_port(self.ports_file, server, self.proc.pid)
            if port is not None:
                self.ports[server] = port
        return self.ports.get(server)

    def start(self) -> Worker:
        out = open(self.stdout_path, "ab")  # noqa: SIM115 - the child owns the fd
        err = open(self.stderr_path, "ab")  # noqa: SIM115
        self.ports = {}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, *self.entry, *self.argv],
                cwd=str(REPO), env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,
            )
        finally:
            out.close()
            err.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the worker's whole process group (no chance to commit or flush)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode

    def output(self) -> str:
        text = ""
        for path in (self.stdout_path, self.stderr_path):
            if path.exists():
                text += path.read_text(errors="replace")
        return text

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-n:])

    def diagnose(self) -> str:
        """The log tail and, while alive, what the worker waits on (its SIGUSR1 dump)."""
        if self.proc is None or not self.alive():
            return self.tail()
        return f"{self.tail()}\n{task_dump(self.proc.pid, self.output)}"

    @property
    def metrics_url(self) -> str:
        return local_url(self.metrics_port)

    def metrics_text(self) -> str | None:
        """The raw /metrics page (None while it does not answer, or before the worker said
        where it listens): what a leak scan reads."""
        port = self.reported_port("metrics")
        return None if port is None else fetch(local_url(port))

    def samples(self) -> Samples:
        """Every sample of its /metrics ({} while it does not answer, or before the worker
        said where it listens)."""
        port = self.reported_port("metrics")
        return {} if port is None else scrape(local_url(port))

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """One sample's current value (None when absent or while /metrics does not answer)."""
        return sample(self.samples(), name, labels)


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.25,
    worker: Worker | None = None,
) -> Any:
    """Poll `predicate` until truthy; on timeout AssertionError naming `what` (+ worker log).
    With `worker`, fail at once (with its log) if it exits while waiting."""
    if worker is None:
        return wait_for(predicate, timeout, what, step)

    def guard() -> None:
        if not worker.alive():
            raise AssertionError(
                f"worker {worker.name} exited ({worker.proc and worker.proc.returncode}) "
                f"while waiting for {what}:\n{worker.tail()}"
            )

    return wait_for(predicate, timeout, what, step, guard=guard,
                    detail=lambda: f"worker log tail:\n{worker.diagnose()}")


def wait_ready(worker: Worker, timeout: float = 60.0) -> None:
    """Ready = /metrics answers (the worker's own registry is up)."""
    wait_until(lambda: worker.metrics_text() is not None, timeout, "metrics endpoint", 0.5,
               worker)


# ---- producing ----------------------------------------------------------------------------

async def _produce_raw(bootstrap: str, items: Iterable[tuple[str, bytes | None, bytes]]) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                max_request_size=2_000_000)
    await producer.start()
    sent = 0
    try:
        futures = []
        for topic, key, value in items:
            futures.append(await producer.send(topic, value, key=key))
            sent += 1
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


def produce_raw(bootstrap: str, items: Iterable[tuple[str, bytes | None, bytes]]) -> int:
    """Send (topic, key bytes or None, value bytes) exactly as given, in order; wait for acks."""
    return int(run(_produce_raw(bootstrap, list(items))))


def report(user: str, value: float, report_id: str, ts: float | None = None) -> bytes:
    return json.dumps({"user_id": user, "value": value, "report_id": report_id,
                       "ts": time.time() if ts is None else ts}).encode()


def membership(user: str, event: str, ts: float | None = None) -> bytes:
    return json.dumps({"user_id": user, "event": event,
                       "ts": time.time() if ts is None else ts}).encode()


# ---- consuming ----------------------------------------------------------------------------

def read_json(bootstrap: str, topic: str, timeout: float = 3.0,
              min_count: int | None = None) -> list[dict[str, Any]]:
    records = run(consume_all(bootstrap, topic, timeout, min_count))
    return [json.loads(r.value) for r in records if r.value is not None]


def wait_for_records(bootstrap: str, topic: str, predicate: Callable[[list[dict[str, Any]]], Any],
                     timeout: float, what: str, worker: Worker | None = None
                     ) -> list[dict[str, Any]]:
    """Re-read `topic` until predicate(records) holds; returns the records."""
    box: list[list[dict[str, Any]]] = []

    def check() -> bool:
        recs = read_json(bootstrap, topic, timeout=1.0)
        box[:] = [recs]
        return bool(predicate(recs))

    wait_until(check, timeout, what, step=0.5, worker=worker)
    return box[0]


# ---- corpus -------------------------------------------------------------------------------

@dataclass
class BadRecord:
    name: str
    topic: str
    key: str | None
    value: bytes
    reason: str
    also_ok: tuple[str, ...] = ()

    @property
    def accepted_reasons(self) -> set[str]:
        return {self.reason, *self.also_ok}


def load_bad_records() -> list[BadRecord]:
    out = []
    for line in (CORPUS / "bad_records.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        if "raw_b64" in item:
            value = base64.b64decode(item["raw_b64"])
        else:
            value = item["raw"].encode()
        if "pad_to" in item:
            value = value + b" " * (int(item["pad_to"]) - len(value))
        out.append(BadRecord(item["name"], item["topic"], item["key"], value, item["reason"],
                             tuple(item.get("also_ok", ()))))
    return out


def laplace_bound(theta: float, tail: float = 1e-9) -> float:
    """|noise| exceeds this with probability < tail (Laplace(theta): P(|X| > t) = e^{-t/theta})."""
    import math
    return theta * math.log(1 / tail) + 2 ** -10


# ---- observing state without touching the product -----------------------------------------

async def _read_keyed(bootstrap: str, topic: str, to_end: bool) -> list[tuple[Any, Any]]:
    if to_end:
        # to the end offsets, not for a fixed time: a timed read stops short under load
        records = await read_to_end(bootstrap, topic, timeout=120.0)
    else:
        # to the end offsets taken now, then at most 1 s more while a writer keeps writing: a
        # lower bound on its progress (a read for a fixed time could stop short of it under
        # load; without the extra second tansu's last record, past its end offset, is missed)
        records = await read_to_end(bootstrap, topic, timeout=60.0, quiet=0.5, most=1.0)
    out = []
    for r in records:
        key = json.loads(r.key) if r.key else None
        value = json.loads(r.value) if r.value else None
        out.append((key, value))
    return out


def users_changelog(bootstrap: str, app_id: str, to_end: bool = True
                    ) -> dict[str, dict[str, Any]]:
    """Final per-user state from the users table's changelog topic (last record per key wins).

    This is how the test sees each user's histogram and latest value: the worker keeps them in
    a changelog-backed Faust table `users`; the changelog is what a restarted worker recovers
    from, so checking it checks exactly the state that survives a crash.

    `to_end=False` reads to the end offsets of the moment and at most 1 s more, without
    waiting for the writes to pause: while a worker is still writing, that is a lower bound on
    its progress (counts only grow), and returns in bounded time.
    """
    latest: dict[str, dict[str, Any]] = {}
    for key, value in run(_read_keyed(bootstrap, f"{app_id}-users-changelog", to_end)):
        if key is None:
            continue
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    return latest


def changelog_records(bootstrap: str, app_id: str) -> list[tuple[Any, Any]]:
    """Every record of the users changelog to its end, in log order per partition: (key,
    state or None)."""
    return list(run(_read_keyed(bootstrap, f"{app_id}-users-changelog", True)))


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    # a consumer in the group that never subscribes: committed() is one OffsetFetch
    # (aiokafka's admin client cannot decode tansu's OffsetFetch response)
    partitions = (await topic_partitions(bootstrap)).get(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        out = {}
        # (the partition count from the broker: a consumer's metadata holds only the topics it
        # subscribed to on Kafka)
        for partition in range(partitions):
            offset = await consumer.committed(TopicPartition(topic, partition))
            if offset is not None:
                out[partition] = offset
        return out
    finally:
        await consumer.stop()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of `topic` (absent: none committed)."""
    return asyncio.run(_committed(bootstrap, group, topic))


async def _group_members(bootstrap: str, group: str, topic: str) -> dict[str, list[int]]:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    (described,) = response.groups
    error_code, _group, state, _type, _protocol, members = described[:6]
    if error_code or state != "Stable":
        return {}
    out = {}
    for member_id, _client, _host, _metadata, assignment in members:
        decoded = ConsumerProtocolMemberAssignment.decode(assignment)
        out[member_id] = sorted(p for t, ps in decoded.assignment if t == topic for p in ps)
    return out


def group_members(bootstrap: str, group: str, topic: str) -> dict[str, list[int]]:
    """The members of a consumer group that is Stable (no rebalance in progress), each with the
    partitions of `topic` the broker assigned it ({} while the group rebalances): what decides
    which worker reads what, told by the broker (DescribeGroups)."""
    return dict(asyncio.run(_group_members(bootstrap, group, topic)))


# Probes (``owns_input``): a report from a user who never joined, on each input partition, is
# refused at once (no grace) and told apart from the scenario's dead letters by its raw record.
PROBE_SETTINGS = {"PUFFERFISH_JOIN_GRACE_SECONDS": "0", "PUFFERFISH_DEADLETTER_INCLUDE_RAW": "true"}
PROBE_RAW = '{"user_id": "probe-'


def probe_keys(partitions: int) -> dict[int, str]:
    """One never-joined user per input partition."""
    from stream_app.kafka.partitioning import partition_for

    keys: dict[int, str] = {}
    n = 0
    while len(keys) < partitions:
        key = f"probe-{n}"
        keys.setdefault(partition_for(key.encode(), partitions), key)
        n += 1
    return keys


def owns_input(bootstrap: str, topics: Topics, worker: Worker) -> bool:
    """Probe every input partition once; True once `worker` refused a probe (it owns an input
    partition, or did). Works on every broker (tansu's DescribeGroups cannot be decoded: see
    ``group_members`` for Kafka); the worker needs PROBE_SETTINGS."""
    produce_raw(bootstrap, [
        (topics.reports, key.encode(), json.dumps(
            {"user_id": key, "value": 0, "report_id": f"{key}-{p}", "ts": 0.0}).encode())
        for p, key in probe_keys(topics.partitions).items()
    ])
    return (worker.metric("pufferfish_events_rejected_total", {"reason": "not_present"})
            or 0) > 0


def not_probes(deadletters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dead letters that are not ``owns_input``'s probes."""
    return [d for d in deadletters if not (d.get("raw") or "").startswith(PROBE_RAW)]


def accepted_total(states: dict[str, dict[str, Any]]) -> int:
    """Accepted reports over every user's histogram (``users_changelog``'s states)."""
    return sum(sum(st.get("counts", [])) for st in states.values())


def wait_counted(bootstrap: str, topics: Topics, reports: int, worker: Worker,
                 timeout: float = 90.0, step: float = 1.0, to_end: bool = False) -> None:
    """Wait until the users changelog counts at least `reports` accepted reports (counts only
    grow: a state still catching up never passes, whereas a release's sum can show the final
    total early when the newest values happen to add up to it). On a timeout: each user's
    (counted, held, present) and the dead letters by reason."""
    seen: dict[str, Any] = {}

    def counted() -> bool:
        states = seen["states"] = users_changelog(bootstrap, topics.app_id, to_end=to_end)
        return accepted_total(states) >= reports

    try:
        wait_until(counted, timeout, f"{reports} reports in the users changelog", step, worker)
    except AssertionError as exc:
        states = seen.get("states", {})
        short = {u: (sum(st.get("counts", [])), len(st.get("held") or []), st.get("present"))
                 for u, st in sorted(states.items())}
        reasons = Counter(d["reason"] for d in read_json(bootstrap, topics.deadletter, 1.0))
        raise AssertionError(f"{exc}\ncounted {accepted_total(states)} of {reports}; per user "
                             f"(counted, held, present): {short}; dead letters by reason: "
                             f"{dict(reasons)}") from None


def read_all_json(bootstrap: str, topic: str, most: float | None = None
                  ) -> list[dict[str, Any]]:
    """Every record of `topic` up to its end (for a topic nobody writes to any more). `most`:
    for a topic still written to, at most this long past its end offsets of the moment (a
    lower bound on the writer's progress: a topic written every half second, as the releases
    on Kafka, may never be quiet for half a second)."""
    return [json.loads(r.value)
            for r in run(read_to_end(bootstrap, topic, timeout=120.0, most=most))
            if r.value is not None]


def join(bootstrap: str, topics: Topics, worker: Worker, users: Sequence[str],
         ts: float = 1.0) -> None:
    """The worker's first membership events: `users` join at `ts`; returns once applied."""
    produce_raw(bootstrap, [(topics.membership, u.encode(), membership(u, "join", ts))
                            for u in users])
    wait_consumed(worker, "membership", len(users))


def wait_consumed(worker: Worker, kind: str, at_least: int, timeout: float = 60.0) -> None:
    def check() -> bool:
        got = worker.metric("pufferfish_events_applied_total", {"kind": kind})
        return got is not None and got >= at_least

    wait_until(check, timeout, f"{at_least} consumed {kind} events", 0.25, worker)


@dataclass
class JournalCheck:
    releases: int
    distinct_seqs: int
    identical_repeats: int
    conflicting_seqs: list[int]
    eps_decreases: list[tuple[int, float, float]]


def check_journal(releases: list[dict[str, Any]]) -> JournalCheck:
    """Seq uniqueness and monotone epsilon_spent over the releases topic (log order)."""
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for rec in releases:
        by_seq.setdefault(int(rec["seq"]), []).append(rec)
    conflicting, repeats = [], 0
    for seq, recs in by_seq.items():
        if len(recs) > 1:
            # a re-sent record (same publication) is identical, ts included; a second draw
            # for the same seq has its own ts even when the value happens to coincide
            keys = {(r["noisy_sum"], r["theta"], r["epsilon_spent"], r["ts"]) for r in recs}
            if len(keys) > 1:
                conflicting.append(seq)
            else:
                repeats += len(recs) - 1
    decreases = []
    for prev, cur in zip(releases, releases[1:], strict=False):
        if cur["epsilon_spent"] < prev["epsilon_spent"]:
            decreases.append((int(cur["seq"]), prev["epsilon_spent"], cur["epsilon_spent"]))
    return JournalCheck(len(releases), len(by_seq), repeats, sorted(conflicting), decreases)


class Cluster:
    """Workers ``a``, ``b``, ... on shared topics, each with its own data_dir, restarted by name
    (on ports the OS picks each time); ``more_releases`` is a scenario's pace: someone owns
    the clock."""

    def __init__(self, broker_url: str, bootstrap: str, topics: Topics, tmp_path: Path,
                 settings: Mapping[str, str], names: Sequence[str] = ("a", "b"),
                 compat: Mapping[str, str] = TANSU_COMPAT) -> None:
        self.bootstrap, self.topics, self.tmp_path = bootstrap, topics, tmp_path
        self.env = {name: worker_env(broker_url, topics, tmp_path / f"data-{name}",
                                     dict(settings), compat=compat) for name in names}
        self.workers: list[Worker] = []

    def start(self, name: str) -> Worker:
        worker = Worker(self.env[name], self.tmp_path,
                        f"{name}{len(self.workers)}").start()
        self.workers.append(worker)
        wait_ready(worker)
        return worker

    def releases(self) -> list[dict[str, Any]]:
        """The releases so far (to the end offsets of the moment, and at most 1 s more)."""
        return read_all_json(self.bootstrap, self.topics.releases, most=1.0)

    def more_releases(self, n: int, worker: Worker) -> None:
        have = len(self.releases())
        wait_until(lambda: len(self.releases()) >= have + n, 120, f"{n} more releases", 0.5,
                   worker)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
