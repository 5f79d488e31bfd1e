"""Item 6: theta of every applicable rule vs the exact theta vs a plain DP baseline.

Plain DP baseline: theta = sensitivity / eps over the declared domain, with the neighbouring
relation that matches the secret: add/remove one user (presence secrets) -> max |a|;
replace one user's value (value / distribution change secrets) -> max(domain) - min(domain).
Noise standard deviation is sqrt(2) * theta, so sd ratios equal theta ratios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pufferfish_core import calibrators as cal
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.vocabulary import Derivation
from pufferfish_paper import paper_values as pv
from pufferfish_paper.experiments import BERN_P, BERN_Q, P4, Q4, USER4, Pair, toy_system
from pufferfish_paper.results import UtilityRow
from pufferfish_paper.uci_inputs import pperp_inputs, pqbinary_inputs

UTILITY_EPS: tuple[float, ...] = (0.1, 0.5, 1.0)
USER_PAIR = "user pair (any population)"
SYSTEM_PRIORS = "priors of X (this population)"

Rule = tuple[str, Callable[[float], Derivation], str]  # name, calibrator, audited on


@dataclass
class Example:
    name: str
    user: Pair
    system: Pair | None
    rules: list[Rule]
    domain: tuple[float, ...]
    presence: bool  # add/remove neighbours (True) or replace-one (False)

    @property
    def sensitivity(self) -> float:
        if self.presence:
            return max(abs(x) for x in self.domain)
        return max(self.domain) - min(self.domain)

    @property
    def sensitivity_text(self) -> str:
        lo, hi = min(self.domain), max(self.domain)
        if self.presence:
            return f"add/remove: max|a| over {{{lo:g}..{hi:g}}} = {self.sensitivity:g}"
        return f"replace-one: max-min over {{{lo:g}..{hi:g}}} = {self.sensitivity:g}"


def _pair_rules(user: Pair, system: Pair | None) -> list[Rule]:
    rules: list[Rule] = []
    if system is not None:
        rules.append(("Proposition 1 (pi* on priors of X)",
                      lambda e: cal.kantorovich(system[0], system[1], e), SYSTEM_PRIORS))
    rules.append(("exact user-local", lambda e: cal.exact(user[0], user[1], e), USER_PAIR))
    return rules


def examples() -> list[Example]:
    s = toy_system()
    a, b = pv.EXAMPLE_A, pv.EXAMPLE_B
    toy = tuple(float(x) for x in pv.EXP_SETTING_SUPPORT)
    rest = s.rest_law(USER4)
    out: list[Example] = []

    def add(name: str, user: Pair, system: Pair | None, rules: list[Rule],
            domain: tuple[float, ...], presence: bool) -> None:
        out.append(Example(name, user, system, rules + _pair_rules(user, system), domain,
                           presence))

    add("S_(a,b) a=5 b=3", (Distribution.point(a), Distribution.point(b)),
        (s.prior_value(USER4, a), s.prior_value(USER4, b)),
        [("Theorem 1", lambda e: cal.value_change(a, b, e), USER_PAIR)], toy, False)
    add("S_(a,perp) a=5", (Distribution.point(a), point_zero()),
        (s.prior_value(USER4, a), s.prior_absent(USER4)),
        [("Theorem 2", lambda e: cal.value_presence(a, e), USER_PAIR)], toy, True)
    add("S_(P,perp) P_4", (P4, point_zero()),
        (s.prior_distribution(USER4, P4), s.prior_absent(USER4)),
        [("Theorem 3 max|t|", lambda e: cal.distribution_presence_bound(P4, e), USER_PAIR),
         ("Theorem 3 relaxed", lambda e: cal.distribution_presence_relaxed(P4, e), USER_PAIR)],
        toy, True)
    add("S_(P,Q) P_4 vs Q_4", (P4, Q4),
        (s.prior_distribution(USER4, P4), s.prior_distribution(USER4, Q4)),
        [("Theorem 4", lambda e: cal.distribution_change_thm4(P4, Q4, e), USER_PAIR)], toy, False)
    add("binary S_(P,Q) 0.2 vs 0.9", (BERN_P, BERN_Q),
        (s.prior_distribution(USER4, BERN_P), s.prior_distribution(USER4, BERN_Q)),
        [("Lemma binary 1/eps", lambda e: cal.distribution_change_binary(BERN_P, BERN_Q, e),
          USER_PAIR),
         ("Theorem 4", lambda e: cal.distribution_change_thm4(BERN_P, BERN_Q, e), USER_PAIR),
         ("relaxed Lemma corrected (rest D1+D2+D3)",
          lambda e: cal.distribution_change_binary_relaxed(BERN_P, BERN_Q, rest, e),
          SYSTEM_PRIORS)],
        (0.0, 1.0), False)
    for item in pperp_inputs():
        p = item.dist
        add(f"UCI S_(P,perp) {item.dataset}", (p, point_zero()), None,
            [("Theorem 3 max|t|", partial(cal.distribution_presence_bound, p), USER_PAIR),
             ("Theorem 3 relaxed", partial(cal.distribution_presence_relaxed, p), USER_PAIR)],
            tuple(float(x) for x in p.support), True)
    for bitem in pqbinary_inputs():
        bp, bq = Distribution.bernoulli(float(bitem.p)), Distribution.bernoulli(float(bitem.q))
        add(f"UCI binary S_(P,Q) {bitem.dataset}", (bp, bq), None,
            [("Lemma binary 1/eps", partial(cal.distribution_change_binary, bp, bq), USER_PAIR),
             ("Theorem 4", partial(cal.distribution_change_thm4, bp, bq), USER_PAIR),
             ("relaxed Lemma corrected (rest-independent)",
              partial(cal.distribution_change_binary_relaxed, bp, bq, point_zero()), USER_PAIR)],
            (0.0, 1.0), False)
    return out


def utility_rows(exs: list[Example], eps_values: tuple[float, ...] = UTILITY_EPS
                 ) -> list[UtilityRow]:
    rows: list[UtilityRow] = []
    for ex in exs:
        for e in eps_values:
            dp = ex.sensitivity / e
            for name, rule, audited_on in ex.rules:
                theta = rule(e).theta
                pair = ex.system if audited_on == SYSTEM_PRIORS else ex.user
                assert pair is not None
                loss = audit(pair[0], pair[1], theta).loss
                rows.append(UtilityRow(ex.name, e, name, theta, dp, loss, audited_on))
    return rows
