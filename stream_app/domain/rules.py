"""Which records the event rules accept: what they need from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from stream_app.domain.admission import Admission
from stream_app.domain.rejection import Rejected


@dataclass(frozen=True)
class EventRules:
    """The settings the event rules read (``Draft.report`` / ``Draft.membership``)."""

    domain: tuple[float, ...]
    grid_log2: int
    dedup_window: int
    auto_join: bool
    known_groups: frozenset[str]
    default_group: str | None  # the group of a join (or auto-join) that names none
    # the tree's contribution bound (release_mechanism=tree; None: every change counts at once)
    admission: Admission | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        # value -> (domain index, grid units) for the values a report may carry: the domain's
        # values on the noise grid (all of them: start-up checks it), computed once
        values = {}
        for j, v in enumerate(self.domain):
            units = _grid_units(v, self.grid_log2)
            if units is not None:
                values[float(v)] = (j, units)
        object.__setattr__(self, "report_values", values)

    def index_and_units(self, value: float) -> tuple[int, int]:
        """(domain index, grid units) of a report's value; Rejected out_of_domain."""
        hit = self.report_values.get(float(value))  # type: ignore[attr-defined]
        if hit is None:
            raise Rejected("out_of_domain")
        return hit  # type: ignore[no-any-return]


def _grid_units(value: float, grid_log2: int) -> int | None:
    """``value / 2**grid_log2`` when that is an integer, else None."""
    q = Fraction(value) / Fraction(2) ** grid_log2
    return int(q) if q.denominator == 1 else None
