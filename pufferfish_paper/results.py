"""Result records shared by the experiments, the plots and the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# A theta passes the audit when its exact loss is at most eps * (1 + AUDIT_RTOL).
AUDIT_RTOL = 1e-9


def match_verdict(ours: np.ndarray, paper: np.ndarray, tol: float) -> tuple[bool, str]:
    """Compare where the paper printed a value. tol = 0: equal to the 15 printed digits."""
    have = ~np.isnan(paper)
    if not have.any():
        return False, "no printed point on this grid"
    o, p = ours[have], paper[have]
    worst = float(np.max(np.abs(o - p) / np.maximum(np.abs(p), 1e-300)))
    if tol == 0.0:
        same = all(f"{a:.15g}" == f"{b:.15g}" for a, b in zip(o, p, strict=True))
        return same, f"{'yes' if same else 'NO'}: all printed digits (max rel err {worst:.1e})"
    ok = worst <= tol
    return ok, f"{'yes' if ok else 'NO'}: max rel err {worst:.1e} (tol {tol:.0e})"


@dataclass
class Curve:
    """One theta(eps) curve on its figure's grid, with its exact audit at every point."""

    key: str
    label: str
    theta: np.ndarray
    loss: np.ndarray
    claims_private: bool
    paper: np.ndarray | None = None  # printed theta at the same eps (nan where not printed)
    tol: float | None = None
    note: str = ""
    style: dict[str, object] = field(default_factory=dict)

    def loss_ratio(self, eps: np.ndarray) -> np.ndarray:
        ratio: np.ndarray = self.loss / eps
        return ratio

    def max_ratio(self, eps: np.ndarray) -> float:
        return float(np.max(self.loss_ratio(eps)))

    def passes(self, eps: np.ndarray) -> bool:
        return bool(np.all(self.loss <= eps * (1.0 + AUDIT_RTOL)))

    def match(self) -> tuple[bool, str] | None:
        if self.paper is None or self.tol is None:
            return None
        return match_verdict(self.theta, self.paper, self.tol)


@dataclass
class CurveFigure:
    """A theta-vs-eps figure of the paper (one panel)."""

    name: str  # e.g. "fig:Brent" or "fig:SuffCondUCIPperp (adult)"
    slug: str  # file stem
    title: str
    eps: np.ndarray
    curves: list[Curve]
    audited_on: str
    logy: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class PlanFigure:
    """The Kantorovich plan pi* of one secret pair on the system's priors of X."""

    name: str
    slug: str
    title: str
    points: np.ndarray
    matrix: np.ndarray
    spread: float
    paper_spread: float
    rule_name: str
    rule_coefficient: float  # theta * eps of the paper's theorem for this pair
    eps: np.ndarray
    rule_loss: np.ndarray  # audit of theta = spread / eps on the system priors
    exact_theta: np.ndarray  # user-local exact theta on eps
    exact_loss: np.ndarray  # its audit on the system priors
    exact_label: str = "exact user-local θ·ε"


@dataclass
class TableCheck:
    """One printed table entry (or row) against ours."""

    what: str
    ours: str
    paper: str
    ok: bool  # ours equals the right value (the printed one, or ERRATA's where it is a misprint)
    note: str = ""
    printed_ok: bool = True  # the printed value itself is right
    printed_issue: str = "paper misprint"

    @property
    def verdict(self) -> str:
        if self.ok and self.printed_ok:
            return "yes" + (f" — {self.note}" if self.note else "")
        if self.ok:
            return f"no, {self.printed_issue}; ours = corrected value — {self.note}"
        return "NO" + (f" — {self.note}" if self.note else "")


@dataclass
class UtilityRow:
    example: str
    eps: float
    rule: str
    theta: float
    dp_theta: float
    loss: float
    audited_on: str

    @property
    def sd(self) -> float:
        return math.sqrt(2.0) * self.theta

    @property
    def sd_ratio(self) -> float:
        return self.theta / self.dp_theta

    @property
    def private(self) -> bool:
        return self.loss <= self.eps * (1.0 + AUDIT_RTOL)
