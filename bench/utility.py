"""Utility: the noise a user gets from each rule vs a plain DP release over the declared domain.

For every data set and eps, theta of each stream rule (``core.policy.calibrate``, the
(pair, rule) table the worker's release plan uses) for the secret pair of that data set, and
the plain DP baseline
theta_DP = sensitivity / eps over the declared domain: add/remove one user (presence secrets)
-> max|a|; replace one user's value (change secrets) -> max(domain) - min(domain).
Laplace noise has standard deviation sqrt(2) * theta, so the sd ratio equals theta / theta_DP
(< 1: less noise than DP for the same eps). Every theta is also checked with the exact two-sided
audit (core.auditor.audit) on the user's own pair: the worst loss / eps must be <= 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench import _common, utility_groups
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.policy import calibrate
from pufferfish_core.vocabulary import STREAM_RULES, PairKind, Rule

NAME = "utility"
EPS_VALUES = (0.1, 0.5, 1.0)


@dataclass(frozen=True)
class Case:
    dataset: str
    secret: str
    kind: PairKind
    dist: Distribution  # the user's estimate P_i
    other: Distribution | None  # Q of another group (distribution_change)
    domain: tuple[float, ...]

    @property
    def presence(self) -> bool:
        return self.kind in (PairKind.VALUE_PRESENCE, PairKind.DISTRIBUTION_PRESENCE)

    @property
    def sensitivity(self) -> float:
        if self.presence:
            return max(abs(x) for x in self.domain)
        return max(self.domain) - min(self.domain)

    def theta(self, eps: float, rule: Rule) -> float:
        first, second = self.audited_pair()
        return calibrate(self.kind, rule, first, second, eps).theta

    def audited_pair(self) -> tuple[Distribution, Distribution]:
        """The user's own secret pair as two laws of the user's contribution (the pair
        core.plan.group_pairs gives a member of a group with law ``dist``)."""
        if self.kind is PairKind.VALUE_CHANGE:
            xs = self.dist.positive_support()
            return Distribution.point(max(xs)), Distribution.point(min(xs))
        if self.kind is PairKind.VALUE_PRESENCE:
            return Distribution.point(max(self.dist.positive_support(), key=abs)), point_zero()
        if self.kind is PairKind.DISTRIBUTION_PRESENCE:
            return self.dist, point_zero()
        assert self.other is not None
        return self.dist, self.other


def paper_cases() -> list[Case]:
    """The paper's 4-user example (user 4), as pufferfish_paper/ sets it up."""
    from pufferfish_paper import paper_values as pv
    from pufferfish_paper.experiments import BERN_P, BERN_Q, P4, Q4

    toy = tuple(float(x) for x in pv.EXP_SETTING_SUPPORT)
    a, b = float(pv.EXAMPLE_A), float(pv.EXAMPLE_B)
    name = "paper 4-user"
    return [
        Case(name, f"S_(a,b) a={a:g} b={b:g}", PairKind.VALUE_CHANGE,
             Distribution.from_points([b, a], [0.5, 0.5]), None, toy),
        Case(name, f"S_(a,perp) a={a:g}", PairKind.VALUE_PRESENCE, Distribution.point(a), None,
             toy),
        Case(name, "S_(P,perp) P_4", PairKind.DISTRIBUTION_PRESENCE, P4, None, toy),
        Case(name, "S_(P,Q) P_4 vs Q_4", PairKind.DISTRIBUTION_CHANGE, P4, Q4, toy),
        Case(name, "S_(P,Q) Bern(0.2) vs Bern(0.9)", PairKind.DISTRIBUTION_CHANGE, BERN_P,
             BERN_Q, (0.0, 1.0)),
    ]


def uci_cases() -> list[Case]:
    """The UCI distributions behind the paper's UCI figures (pufferfish_paper.uci_inputs)."""
    from pufferfish_paper.uci_inputs import pperp_inputs, pqbinary_inputs

    out = [
        Case(f"UCI {it.dataset}", f"S_(P,perp) {it.description.split(',')[0]}",
             PairKind.DISTRIBUTION_PRESENCE, it.dist, None,
             tuple(float(x) for x in it.dist.support))
        for it in pperp_inputs()
    ]
    out += [
        Case(f"UCI {it.dataset}", f"S_(P,Q) {it.description.split(':')[0]}",
             PairKind.DISTRIBUTION_CHANGE, Distribution.bernoulli(float(it.p)),
             Distribution.bernoulli(float(it.q)), (0.0, 1.0))
        for it in pqbinary_inputs()
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--by-group", action="store_true",
                   help="per-group releases on UCI adult (bench/utility_groups.py)")
    args = p.parse_args(argv)
    if args.by_group:
        return utility_groups.run(args, argv)
    started = time.perf_counter()
    cases = paper_cases() + ([] if args.quick else uci_cases())
    eps_values = (0.5,) if args.quick else EPS_VALUES
    rows = []
    worst_loss = 0.0
    for case in cases:
        pair = case.audited_pair()
        for eps in eps_values:
            dp = case.sensitivity / eps
            cells: list[object] = [case.dataset, case.secret, eps, dp]
            for rule in STREAM_RULES:
                theta = case.theta(eps, rule)
                worst_loss = max(worst_loss, audit(pair[0], pair[1], theta).loss / eps)
                cells.append(f"{_common.fmt(theta)} ({theta / dp:.3f})")
            rows.append(tuple(cells))
    elapsed = time.perf_counter() - started
    headers = ("data set", "secret", "eps", "theta_DP",
               *(f"{r.value} theta (sd / DP sd)" for r in STREAM_RULES))
    print("theta per rule, (noise sd ratio to plain DP); < 1 = less noise than plain DP")
    print(_common.text_table(headers, rows))
    verdict = "yes" if worst_loss <= 1 + 1e-9 else "NO"
    print(f"every theta passes the exact two-sided audit on the user's pair: {verdict} "
          f"(worst loss / eps = {worst_loss:.4f}); {elapsed:.1f} s")
    body = (
        __doc__.split("\n", 1)[1].strip()
        + f"\n\nWorst audit loss / eps over all cells: {worst_loss:.4f} (pass: {verdict}). "
        "UCI declared domain = the coded support of the attribute (as pufferfish_paper/ codes it; "
        "ERRATA 10); the paper's toy domain is {1..5}, binary cases {0, 1}.\n\n"
        + _common.markdown_table(headers, rows) + "\n"
    )
    _common.report(args, NAME, "4. Utility: noise sd vs plain DP", _common.command_line(NAME, argv),
                   body)
    return 0 if verdict == "yes" else 1


if __name__ == "__main__":
    raise SystemExit(main())
