"""The release noise must not be reproducible: not by re-running, not by seeding Python/numpy.

Worker-level check (two runs of the real worker on the same inputs) lives in test_leaks.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from pufferfish_core.noise import secure_laplace_release

pytestmark = pytest.mark.timeout(60)


def _seeded_draws(n: int, theta: float) -> list[float]:
    out = []
    for _ in range(n):
        random.seed(1234)
        np.random.seed(1234)
        out.append(secure_laplace_release(10.0, theta))
    return out


def test_core_noise_ignores_python_and_numpy_seeds() -> None:
    draws = _seeded_draws(40, theta=4.0)
    # With theta/g = 4096 grid steps, 40 honest draws collide only with negligible probability;
    # a noise source driven by the (re-seeded) random/numpy state would give 1 distinct value.
    assert len(set(draws)) >= 35, draws


def test_core_noise_two_sequences_with_same_seed_differ() -> None:
    random.seed(7)
    np.random.seed(7)
    first = [secure_laplace_release(0.0, 1.0) for _ in range(10)]
    random.seed(7)
    np.random.seed(7)
    second = [secure_laplace_release(0.0, 1.0) for _ in range(10)]
    assert first != second


def test_core_noise_does_not_consume_python_random_state() -> None:
    random.seed(99)
    np.random.seed(99)
    secure_laplace_release(3.0, 2.0)
    after_py, after_np = random.random(), np.random.random()
    random.seed(99)
    np.random.seed(99)
    assert (random.random(), np.random.random()) == (after_py, after_np)
