"""Per-call cost of each calibration rule: ``python -m bench.core_rules``.

Random priors on integer supports with K = 4, 16, 64, 256 points; median of timeit repeats.
"""

from __future__ import annotations

import os
import statistics
import time
import timeit
from collections.abc import Callable

import numpy as np

from pufferfish_core import calibrators as cal
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.policy import calibrate
from pufferfish_core.vocabulary import PairKind, Rule

SIZES = (4, 16, 64, 256)
TARGET_SECONDS_PER_REPEAT = 0.02
REPEATS = 5
EPS = 0.5


def random_law(rng: np.random.Generator, k: int, offset: int = 0) -> Distribution:
    support = np.sort(rng.choice(np.arange(-2 * k, 2 * k), size=k, replace=False)) + offset
    return Distribution.from_points(support.tolist(), rng.dirichlet(np.ones(k)).tolist())


def cases(k: int, rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    p, q = random_law(rng, k), random_law(rng, k, offset=3)
    rest = random_law(rng, k)
    b2, b9 = Distribution.bernoulli(0.2), Distribution.bernoulli(0.9)
    zero = Distribution.point(0)
    top = float(max(p.positive_support(), key=abs))
    return {
        "thm1 value_change": lambda: cal.value_change(top, 0.0, EPS),
        "thm3 bound": lambda: cal.distribution_presence_bound(p, EPS),
        "thm3 relaxed (Brent)": lambda: cal.distribution_presence_relaxed(p, EPS),
        "thm4": lambda: cal.distribution_change_thm4(p, q, EPS),
        "binary relaxed (rest K)": lambda: cal.distribution_change_binary_relaxed(
            b2, b9, rest, EPS
        ),
        "kantorovich (P,Q)": lambda: cal.kantorovich(p, q, EPS),
        "audit (P,Q) one theta": lambda: audit(p, q, 2.0),
        "exact (P,Q)": lambda: cal.exact(p, q, EPS),
        "exact (P,d0)": lambda: cal.exact(p, zero, EPS),
        "calibrate exact presence": lambda: calibrate(
            PairKind.DISTRIBUTION_PRESENCE, Rule.EXACT, p, zero, EPS
        ),
    }


def microseconds(func: Callable[[], object]) -> tuple[float, float]:
    """(median, min) per-call CPU time over REPEATS timeit repeats.

    CPU time of this process (time.process_time), not wall time: the machine is shared, and
    wall time would charge other processes' work to these rules.
    """
    timer = timeit.Timer(func, timer=time.process_time)
    number, elapsed = timer.autorange()
    number = max(1, int(number * TARGET_SECONDS_PER_REPEAT / max(elapsed, 1e-9)))
    runs = [run / number * 1e6 for run in timer.repeat(repeat=REPEATS, number=number)]
    return statistics.median(runs), min(runs)


def main(argv: list[str] | None = None) -> int:
    rng = np.random.default_rng(20240601)
    table: dict[str, dict[int, tuple[float, float]]] = {}
    for k in SIZES:
        for name, func in cases(k, rng).items():
            table.setdefault(name, {})[k] = microseconds(func)
    width = max(len(name) for name in table)
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    print(f"per-call CPU time in microseconds, median / min of {REPEATS} repeats (eps = {EPS})")
    print(f"(1-minute load per CPU while running: {load:.2f}; > 1 still inflates the numbers)")
    print(f"{'rule':<{width}}" + "".join(f"{f'K={k}':>16}" for k in SIZES))
    for name, row in table.items():
        cells = "".join(f"{f'{row[k][0]:.0f} / {row[k][1]:.0f}':>16}" for k in SIZES)
        print(f"{name:<{width}}{cells}")
    exact_16 = max(table["exact (P,Q)"][16][0], table["exact (P,d0)"][16][0])
    verdict = "yes" if exact_16 <= 1000.0 else "NO"
    print(f"exact <= 1 ms per call at K = 16 (median): {verdict} ({exact_16:.0f} us, worst pair)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
