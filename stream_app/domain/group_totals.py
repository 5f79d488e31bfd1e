"""Each group's exact sum and number of present members in one partition aggregate: what the
releaser needs for per-group releases (``release_by_group``, core/group_plan.py). Carried on
the internal partials topic only, like the exact total (``Partial.group_totals``); never
logged, never a metric: a release publishes them only with fresh noise.

A member counts in its group while present (its contribution's ``units`` are its newest value,
0 before its first report); the groups' sums add up to the partition's ``sum_units``.
"""

from __future__ import annotations

from typing import Protocol


class Member(Protocol):
    """What a user's contribution says of its membership (``Contribution``)."""

    @property
    def units(self) -> int: ...

    @property
    def group(self) -> str | None: ...

    @property
    def present(self) -> bool: ...


class GroupTotals:
    """Mixed into ``PartitionAggregate``, which holds the field: group -> [sum units, count]."""

    group_totals: dict[str, list[int]]

    def move_member(self, old: Member | None, new: Member) -> None:
        """Replace one user's part in its group's totals: ``old`` (None: a new user) by
        ``new``."""
        if old is not None and old.present and old.group is not None:
            held = self.group_totals.setdefault(old.group, [0, 0])
            held[0] -= old.units
            held[1] -= 1
        if new.present and new.group is not None:
            held = self.group_totals.setdefault(new.group, [0, 0])
            held[0] += new.units
            held[1] += 1
