"""``python -m bench NAME`` runs a benchmark; ``python -m bench --list`` lists them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

BENCHMARKS: dict[str, str] = {
    "throughput": "1. end-to-end events/s: worker vs a raw aiokafka consume->produce loop",
    "recalibration": "2. release plan cost vs groups G and domain K per rule; ingest cost vs N",
    "memory": "3. memory per user in the worker's state (K = 16, 1e5 and 1e6 users)",
    "utility": "4. noise sd of each rule vs plain DP, paper example and UCI data sets",
    "latency": "5. report -> first release including it, light and saturating load",
    "core_rules": "per-call cost of each core calibration rule (K = 4..256)",
    "robust": "6. robust theta / plain theta of learned laws vs group size",
    "composition": "7. pointwise charge vs exact loss of T releases (persistent, i.i.d.)",
    "continual": "8. tree mechanism vs independent releases at one window budget (RMSE)",
    "backlog": "9. drain time of a transactional backlog vs a plain one (noida-db)",
    "recovery": "10. restart at 1e5/1e6 users: to /metrics, a report counted, a release; RSS, disk",
    "chaos": "11. faults under load on Kafka: no tick, seq or node twice, exact sums (issue 46)",
}


def usage() -> str:
    lines = ["usage: python -m bench <name> [--quick] [--no-write] [--results PATH] [...]",
             "       python -m bench <name> --help", "", "benchmarks:"]
    lines += [f"  {name:<14} {text}" for name, text in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--list":
        for name, text in BENCHMARKS.items():
            print(f"{name:<14} {text}")
        return 0
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"bench: error: unknown benchmark {name!r} (python -m bench --list)", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{name}")
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
