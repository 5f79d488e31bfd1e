"""Hypothesis strategies shared by the core property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from pufferfish_core.distribution import Distribution


@st.composite
def integer_law(
    draw: st.DrawFn, max_k: int = 20, lo: int = -20, hi: int = 20, max_count: int = 1000
) -> Distribution:
    """A histogram (integer counts up to ``max_count``, positive total) on up to ``max_k``
    distinct integers in [lo, hi]."""
    k = draw(st.integers(1, max_k))
    xs = draw(st.lists(st.integers(lo, hi), min_size=k, max_size=k, unique=True))
    counts = draw(st.lists(st.integers(0, max_count), min_size=k, max_size=k))
    if sum(counts) == 0:
        counts[0] = 1
    return Distribution.from_counts(xs, counts)
