"""Glue from a user's stored state to core.user_theta (no maths here, only inputs and a cache)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache, reduce
from pathlib import Path

from core.distribution import Distribution
from core.errors import PufferfishInputError
from core.user_theta import PairKind, user_theta
from stream_app.settings import Settings
from stream_app.state import UserState

CACHE_SIZE = 4096


def load_priors(path: Path) -> dict[str, Distribution]:
    """``{group: {support, probs}}`` from a JSON file; PufferfishInputError naming the field."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PufferfishInputError("priors_file", f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PufferfishInputError("priors_file", f"is not valid JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or not doc:
        raise PufferfishInputError(
            "priors_file", "must be a non-empty object {group: {support, probs}}"
        )
    out: dict[str, Distribution] = {}
    for group, spec in doc.items():
        if not isinstance(spec, dict):
            raise PufferfishInputError(f"priors_file.{group}", "must be {support, probs}")
        try:
            out[str(group)] = Distribution.model_validate(spec)
        except PufferfishInputError as exc:
            raise PufferfishInputError(f"priors_file.{group}.{exc.field}", exc.message) from None
    return out


def _reduced(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Counts divided by their gcd: histograms with the same proportions share a cache entry."""
    g = reduce(math.gcd, counts, 0)
    return tuple(c // g for c in counts) if g > 1 else counts


class UserCalibrator:
    """state -> (theta_i, spread_i, binding_pair_i) through core.user_theta, memoised."""

    def __init__(self, settings: Settings, references: Mapping[str, Distribution]) -> None:
        self.domain = settings.domain
        self.pairs = frozenset(PairKind(p) for p in settings.pairs)
        self.epsilon = settings.epsilon
        self.rule = settings.rule
        self.declared = settings.prior_source == "declared"
        self.references = dict(references)
        # The group only matters for S_{P,Q} (it excludes the user's own group's reference).
        self._group_matters = self.declared or PairKind.DISTRIBUTION_CHANGE in self.pairs
        self._cached = lru_cache(maxsize=CACHE_SIZE)(self._compute)

    def __call__(self, state: UserState) -> tuple[float, float, str | None]:
        counts = _reduced(state.counts) if not self.declared else ()
        group = state.group if self._group_matters else None
        return self._cached(counts, state.present, group)

    def _estimate(self, counts: tuple[int, ...], group: str | None) -> Distribution | None:
        if self.declared:
            return self.references.get(group) if group is not None else None
        points = [(v, c) for v, c in zip(self.domain, counts, strict=False) if c > 0]
        if not points:
            return None
        return Distribution.from_counts([v for v, _ in points], [c for _, c in points])

    def _compute(
        self, counts: tuple[int, ...], present: bool, group: str | None
    ) -> tuple[float, float, str | None]:
        dist = self._estimate(counts, group)
        cal = user_theta(
            dist, present, group, self.pairs, self.epsilon, rule=self.rule,
            references=self.references,
        )
        pair = cal.binding_pair
        binding = str(getattr(pair, "value", pair)) if pair is not None else None
        return float(cal.theta), float(cal.spread), binding
