"""The UCI distributions behind fig:SuffCondUCIPperp and fig:SuffCondUCIPQBinary.

The paper does not say how categories become numbers; ERRATA 10 gives the codings that
reproduce its curves (adult education is neither education-num nor alphabetical).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np

from pufferfish_core.distribution import Distribution
from pufferfish_data import Table, load_adult, load_bank_full, load_student_por

ADULT_EDUCATION_CODE: dict[str, int] = {
    "Bachelors": 1, "HS-grad": 2, "Masters": 3, "Assoc-voc": 4, "11th": 5, "Doctorate": 6,
    "Some-college": 7, "Assoc-acdm": 8, "9th": 9, "Prof-school": 10, "5th-6th": 11,
    "7th-8th": 12, "10th": 13, "1st-4th": 14, "Preschool": 15, "12th": 16,
}
STUDENT_ROMANTIC_CODE: dict[str, int] = {"no": 1, "yes": 2}
BANK_MARITAL_CODE: dict[str, int] = {"married": 1, "single": 2, "divorced": 3}
ADULT_MARRIED = frozenset({"Husband", "Wife"})


@dataclass(frozen=True)
class PperpInput:
    """P_i for S_{P,perp}: a coded attribute within one sub-population."""

    dataset: str
    description: str
    dist: Distribution
    rows: int
    coding: str


@dataclass(frozen=True)
class PQBinaryInput:
    """Bernoulli P_i, Q_i for S_{P,Q}: Pr(feature = 1) in two sub-populations (exact fractions)."""

    dataset: str
    description: str
    p: Fraction
    q: Fraction
    coding: str


def _coded(values: np.ndarray, code: dict[str, int], field: str) -> Distribution:
    counts = Counter(values.tolist())
    unknown = set(counts) - set(code)
    if unknown:
        raise ValueError(f"{field}: values without a code: {sorted(unknown)}")
    support = sorted(code[v] for v in counts)
    by_code = {code[v]: n for v, n in counts.items()}
    return Distribution.from_counts(support, [by_code[x] for x in support])


def _coding_text(code: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in code.items())


@cache
def _tables() -> tuple[Table, Table, Table]:
    """adult (data + test), student-por, bank-full: loaded and checksum-verified once."""
    return load_adult(), load_student_por(), load_bank_full()


def pperp_inputs() -> list[PperpInput]:
    adult, student, bank = _tables()
    white = adult.column("race") == "White"
    higher = student.column("higher") == "yes"
    loan = bank.column("loan") == "yes"
    return [
        PperpInput(
            "adult", "Pr(education | race = White), adult.data + adult.test",
            _coded(adult.column("education")[white], ADULT_EDUCATION_CODE, "education"),
            int(white.sum()), "education: " + _coding_text(ADULT_EDUCATION_CODE),
        ),
        PperpInput(
            "student", "Pr(romantic | higher = yes), student-por.csv",
            _coded(student.column("romantic")[higher], STUDENT_ROMANTIC_CODE, "romantic"),
            int(higher.sum()), "romantic: " + _coding_text(STUDENT_ROMANTIC_CODE),
        ),
        PperpInput(
            "bank", "Pr(marital | loan = yes), bank-full.csv",
            _coded(bank.column("marital")[loan], BANK_MARITAL_CODE, "marital"),
            int(loan.sum()), "marital: " + _coding_text(BANK_MARITAL_CODE),
        ),
    ]


def _rate(flags: np.ndarray, group: np.ndarray) -> Fraction:
    return Fraction(int((flags & group).sum()), int(group.sum()))


def pqbinary_inputs() -> list[PQBinaryInput]:
    adult, student, bank = _tables()
    married = np.isin(adult.column("relationship"), list(ADULT_MARRIED))
    race = adult.column("race")
    romantic = student.column("romantic") == "yes"
    freetime = student.column("freetime")
    loan = bank.column("loan") == "yes"
    job = bank.column("job")
    return [
        PQBinaryInput(
            "adult",
            "married (relationship Husband/Wife): Asian-Pac-Islander vs Amer-Indian-Eskimo",
            _rate(married, race == "Asian-Pac-Islander"),
            _rate(married, race == "Amer-Indian-Eskimo"),
            "married = 1 if relationship in {Husband, Wife}, else 0",
        ),
        PQBinaryInput(
            "student", "romantic = yes: freetime 5 vs freetime 2",
            _rate(romantic, freetime == "5"), _rate(romantic, freetime == "2"),
            "romantic: yes = 1, no = 0",
        ),
        PQBinaryInput(
            "bank", "loan = yes: job blue-collar vs management",
            _rate(loan, job == "blue-collar"), _rate(loan, job == "management"),
            "loan: yes = 1, no = 0",
        ),
    ]
