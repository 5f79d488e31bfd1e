"""Composition: the stream's pointwise charge vs the exact loss of T releases.

For every secret pair of bench/utility.py (the paper's 4-user example and the UCI laws, same
cases) at eps in {1, 0.5}, with theta = the exact rule's theta (``core.policy.calibrate``):
the stream charges max(eps, spread / theta) per release (``core.budget.composition_charge``,
spread = ``core.kantorovich.plan_spread``), T * charge in all. Against it, exact losses of T
releases for three sequence models of the user's value, all under the same secret pair:
*persistent* (one draw, T noisy copies: ``core.composition.tfold_loss`` = the one-release loss
at theta / T), *i.i.d.* (a fresh draw per release: the law is a product, so the loss is
exactly T * the one-release loss) and *worst block* (the value is redrawn at chosen times and
persists in between; the blocks are independent, so the loss is the sum of the blocks'
persistent losses, maximised over every partition of T by a dynamic programme). Every model
is covered by the pointwise charge; only the pointwise charge covers all of them at once.
"""

from __future__ import annotations

import math
import os
import time

from bench import _common
from bench.utility import Case, paper_cases, uci_cases
from pufferfish_core.auditor import audit
from pufferfish_core.budget import composition_charge
from pufferfish_core.composition import tfold_loss
from pufferfish_core.kantorovich import plan_spread
from pufferfish_core.vocabulary import Rule

NAME = "composition"
EPS_VALUES = (1.0, 0.5)
RELEASES = (1, 2, 10, 100)


def block_losses(persistent: list[float]) -> list[float]:
    """best[t] = max over partitions of t releases into blocks of sum persistent[block - 1]."""
    best = [0.0]
    for t in range(1, len(persistent) + 1):
        best.append(max(best[t - s] + persistent[s - 1] for s in range(1, t + 1)))
    return best[1:]


def _cell(value: float) -> str:
    return "inf (refused)" if math.isinf(value) else f"{value:.3f}"


def case_rows(
    case: Case, eps: float, horizon: int
) -> tuple[list[tuple[object, ...]], dict[str, float]]:
    first, second = case.audited_pair()
    theta = case.theta(eps, Rule.EXACT)
    one = audit(first, second, theta).loss
    spread = plan_spread(first, second)
    charge = composition_charge(spread, theta, eps)
    persistent = [tfold_loss(first, second, theta, t) for t in range(1, horizon + 1)]
    blocks = block_losses(persistent)
    rows: list[tuple[object, ...]] = []
    summary: dict[str, float] = {}
    for t in (r for r in RELEASES if r <= horizon):
        pointwise = t * charge
        pers, iid, block = persistent[t - 1], t * one, blocks[t - 1]
        ratio = pers / pointwise if math.isfinite(pointwise) else 0.0
        rows.append((
            case.dataset, case.secret, eps, f"{theta:.4g}", _cell(charge), t, f"{t * eps:g}",
            _cell(pointwise), _cell(pers), _cell(iid), _cell(block),
            f"{ratio:.3f}" if math.isfinite(pointwise) else "-",
        ))
        summary[f"persistent/{t}"] = pers
        summary[f"pointwise/{t}"] = pointwise
        summary[f"iid/{t}"] = iid
        summary[f"block/{t}"] = block
    return rows, summary


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    cases = paper_cases() + ([] if args.quick else uci_cases())
    eps_values = (1.0,) if args.quick else EPS_VALUES
    horizon = 10 if args.quick else max(RELEASES)
    rows: list[tuple[object, ...]] = []
    violations = 0
    headline: list[str] = []
    for case in cases:
        for eps in eps_values:
            got, summary = case_rows(case, eps, horizon)
            rows += got
            for t in (r for r in RELEASES if r <= horizon):
                worst = max(summary[f"persistent/{t}"], summary[f"iid/{t}"],
                            summary[f"block/{t}"])
                violations += worst > summary[f"pointwise/{t}"] * (1 + 1e-9)
            if eps == 1.0:
                t = horizon
                headline.append(
                    f"{case.dataset} {case.secret}: T = {t}: pointwise "
                    f"{_cell(summary[f'pointwise/{t}'])}, persistent "
                    f"{_cell(summary[f'persistent/{t}'])}, i.i.d. {_cell(summary[f'iid/{t}'])}, "
                    f"worst block {_cell(summary[f'block/{t}'])}"
                )
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()[0]
    headers = ("data set", "secret", "eps", "theta (exact)", "charge / release", "T", "T eps",
               "pointwise T charge", "persistent (exact)", "i.i.d. (exact)",
               "worst block (exact)", "persistent / pointwise")
    print(_common.text_table(headers, rows))
    verdict = "yes" if violations == 0 else "NO"
    print(f"every exact loss <= the pointwise charge: {verdict}; {elapsed:.1f} s, "
          f"load average {load_before:.2f} before / {load_after:.2f} after")
    body = (
        __doc__.split("\n", 1)[1].strip()
        + "\n\nColumns: 'charge / release' = max(eps, spread / theta); 'inf (refused)' = theta "
        "is 0 (the exact audit passes without noise) but the plan moves mass, so the stream "
        "refuses every release of that pair. 'persistent / pointwise' = how much of the charge "
        "a persistent value actually uses. "
        f"Every exact loss is at most the pointwise charge: {verdict}. "
        f"Horizon T <= {horizon} for every law (no law is too expensive: the persistent loss is "
        f"one audit at theta / T). Run time {elapsed:.1f} s, load average {load_before:.2f} "
        f"before / {load_after:.2f} after (nproc {os.cpu_count()}).\n\n"
        + _common.markdown_table(headers, rows)
        + "\n\n**Headline** (eps = 1):\n\n" + "\n".join(f"- {h}" for h in headline) + "\n"
    )
    _common.report(args, NAME, "7. Composition: pointwise charge vs exact T-release loss",
                   _common.command_line(NAME, argv), body)
    return 0 if verdict == "yes" else 1


if __name__ == "__main__":
    raise SystemExit(main())
