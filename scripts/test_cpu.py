"""Where the suite's time goes: the per-test wall and CPU seconds that tests/conftest.py writes
when PUFFERFISH_TEST_CPU_LOG is set (one JSON line per test; CPU: the pytest process and the
children it waited for: workers, CLI runs, brokers a test starts).

On 2 cores the suite is CPU-bound, so its wall time is about the sum of CPU seconds / 2; the
modules with the most CPU are what to cut first. tests/README.md keeps the table.
Usage: python scripts/test_cpu.py LOG.jsonl [--top N]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.log, encoding="utf-8") if line.strip()]
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in rows:
        m = modules[row["test"].split("::")[0]]
        m[0] += row["wall"]
        m[1] += row["cpu"]
        m[2] += 1
    wall = sum(r["wall"] for r in rows)
    cpu = sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests: {wall:,.0f} s of test wall time, {cpu:,.0f} CPU s")
    print(f"\nmodules by CPU seconds (top {args.top}): cpu  wall  tests")
    for name, (w, c, n) in sorted(modules.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{c:8.1f} {w:8.1f} {int(n):5d}  {name}")
    print(f"\ntests by CPU seconds (top {args.top}): cpu  wall")
    for row in sorted(rows, key=lambda r: -r["cpu"])[:args.top]:
        print(f"{row['cpu']:8.1f} {row['wall']:8.1f}  {row['test']}")


if __name__ == "__main__":
    main()
