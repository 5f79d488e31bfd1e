"""Find distinctive numbers (sentinels) in emitted text, in any usual number formatting."""

from __future__ import annotations

import re
from collections.abc import Iterable


def spellings(number: int) -> set[str]:
    """Ways a program may print `number`: 7777, 7777.0, 7,777, 7_777, 7.777e+03, 7.777000e+03."""
    out = {str(number), f"{number:,}", f"{number:_}", f"{float(number)!r}", f"{number:e}",
           f"{float(number):g}", f"{number:.3e}", f"{number:.6g}", f"{number:.17g}"}
    mantissa = str(number).rstrip("0")
    if len(mantissa) > 1:
        # shortest scientific forms: 7.777e+03, 7.777e3, 7.777E+03
        exp = len(str(number)) - 1
        short = f"{mantissa[0]}.{mantissa[1:]}"
        out |= {f"{short}e+{exp:02d}", f"{short}e{exp}", f"{short}E+{exp:02d}"}
    # only exact spellings: a rounded form (1.068e+07) may as well be a noisy value
    return {s for s in out if float(s.replace(",", "").replace("_", "")) == number}


def pattern(numbers: Iterable[int]) -> re.Pattern[str]:
    """Matches any spelling of any number, not as part of a longer number or word."""
    alts = sorted({re.escape(s) for n in numbers for s in spellings(n)}, key=len, reverse=True)
    # not preceded by a digit/letter/point/comma (e.g. ",777" in a log timestamp ",777"),
    # not followed by more digits or a decimal part other than zeros.
    return re.compile(r"(?<![\w.,])(?:" + "|".join(alts) + r")(?:\.0+)?(?![\w]|\.\d)")


def find(text: str, numbers: Iterable[int], context: int = 60) -> list[str]:
    hits = []
    for m in pattern(numbers).finditer(text):
        lo, hi = max(0, m.start() - context), min(len(text), m.end() + context)
        hits.append(text[lo:hi].replace("\n", "\\n"))
    return hits
