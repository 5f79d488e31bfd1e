"""A deterministic workload (joins, reports, re-sent duplicates) and its independent truth.

Expected values are computed here from what the test sends, never by the product's code:
the running sum is the sum over present users of the value of their newest (largest ts)
accepted report; a user's histogram counts each distinct accepted report id once.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from stream_app.domain.digests import report_digest
from stream_app.domain.state import UserState
from tests.kafka_helpers import Record
from tests.reliability.harness import TANSU_COMPAT, Topics, membership

DEDUP_WINDOW = int(TANSU_COMPAT["PUFFERFISH_DEDUP_WINDOW"])  # the ids a user's state keeps

DOMAIN = (0, 1, 2, 3, 4, 5)


@dataclass
class Workload:
    users: list[str]
    reports: list[tuple[str, int, str, float]] = field(default_factory=list)  # user, value, id, ts
    duplicates: list[tuple[str, int, str, float]] = field(default_factory=list)

    @classmethod
    def make(cls, n_users: int, per_user: int, dup_every: int, seed: int, prefix: str = "u"
             ) -> Workload:
        rng = random.Random(seed)  # test data only; the product's noise never uses this
        users = [f"{prefix}{i:03d}" for i in range(n_users)]
        wl = cls(users)
        ts0 = time.time()
        k = 0
        for round_ in range(per_user):
            for user in users:
                k += 1
                rep = (user, rng.choice(DOMAIN), f"{user}-r{round_}", ts0 + k * 1e-3)
                wl.reports.append(rep)
                if dup_every and k % dup_every == 0:
                    wl.duplicates.append(rep)
        return wl

    def joins(self, topics: Topics) -> list[tuple[str, bytes, bytes]]:
        return [(topics.membership, u.encode(), membership(u, "join")) for u in self.users]

    @staticmethod
    def encode(topics: Topics, reps: list[tuple[str, int, str, float]]) -> list[Record]:
        return [
            (topics.reports, u.encode(),
             json.dumps({"user_id": u, "value": v, "report_id": rid, "ts": ts}).encode())
            for u, v, rid, ts in reps
        ]

    def feed(self, topics: Topics, reps: list[tuple[str, int, str, float]], size: int
             ) -> list[list[Record]]:
        """`reps` in chunks of `size` (for a PacedProducer), each followed by the re-sent
        duplicates of its own reports; duplicates of reports not in `reps` go in chunk 0."""
        chunks = [reps[i:i + size] for i in range(0, len(reps), size)]
        where = {rep: n for n, chunk in enumerate(chunks) for rep in chunk}
        dups: list[list[tuple[str, int, str, float]]] = [[] for _ in chunks]
        for dup in self.duplicates:
            dups[where.get(dup, 0)].append(dup)
        return [self.encode(topics, c) + self.encode(topics, d)
                for c, d in zip(chunks, dups, strict=True)]

    def expected_sum(self) -> int:
        newest: dict[str, tuple[float, int]] = {}
        for user, value, _rid, ts in self.reports:
            if user not in newest or ts >= newest[user][0]:
                newest[user] = (ts, value)
        return sum(v for _, v in newest.values())

    def expected_histograms(self) -> dict[str, list[int]]:
        seen: dict[str, Counter[int]] = {u: Counter() for u in self.users}
        for user, value, _rid, _ts in {r[2]: r for r in self.reports}.values():
            seen[user][value] += 1
        return {u: [c[v] for v in DOMAIN] for u, c in seen.items()}

    def expected_ids(self, window: int = DEDUP_WINDOW) -> dict[str, set[str]]:
        """Per user, the ids the state keeps: its last `window` distinct report ids (a user's
        reports are applied in the order they were produced)."""
        ids: dict[str, dict[str, None]] = {u: {} for u in self.users}
        for user, _v, rid, _ts in self.reports:
            ids[user][rid] = None
        return {u: set(list(order)[-window:]) for u, order in ids.items()}


def histogram_mismatches(wl: Workload, states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Users whose recovered histogram or id set differs from the truth (empty dict = exact)."""
    bad: dict[str, Any] = {}
    expected = wl.expected_histograms()
    ids = wl.expected_ids()
    for user in wl.users:
        st = states.get(user)
        if st is None:
            bad[user] = "missing from the users table"
            continue
        counts = list(st.get("counts", []))
        recent = list(UserState.from_json(st).recent_ids)  # 64-bit digests of the report ids
        problems = []
        if counts != expected[user]:
            problems.append(f"counts {counts} != expected {expected[user]}")
        if len(recent) != len(set(recent)):
            problems.append("recent_ids has repeats")
        want = {report_digest(r) for r in ids[user]}
        if set(recent) != want:
            problems.append(f"{len(want - set(recent))} report ids missing")
        if not st.get("present"):
            problems.append("not present")
        if problems:
            bad[user] = "; ".join(problems)
    return bad

