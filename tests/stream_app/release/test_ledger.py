"""stream_app.release.ledger: privacy windows renew the budget forward only (no broker)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from stream_app.metrics import Metrics
from stream_app.release.ledger import Ledger
from stream_app.settings import Settings


def _ledger(tmp_path: Path, window: float | None = 20.0) -> Ledger:
    s = Settings(budget_total=2.0, release_period_seconds=1.0, budget_window_seconds=window,
                 data_dir=tmp_path, metrics_port=None)
    return Ledger(s, Metrics.create())


def test_a_new_window_renews_the_budget_and_an_earlier_one_never_reopens(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.roll(100.0)  # window 5
    assert ledger.window == 5
    ledger.charge_release(1.0)
    ledger.charge_release(1.0)
    assert not ledger.affordable(1.0) and ledger.exhausted
    ledger.roll(119.9)  # still window 5: nothing renews
    assert ledger.window == 5 and ledger.accountant.spent == 2.0 and ledger.exhausted
    ledger.roll(120.0)  # window 6: a fresh budget
    assert ledger.window == 6 and ledger.accountant.spent == 0.0 and not ledger.exhausted
    assert ledger.metrics.budget_exhausted._value.get() == 0
    ledger.charge_release(1.5)
    ledger.roll(101.0)  # the clock stepped back: window 5 is not reopened, 6 keeps its spend
    assert ledger.window == 6 and ledger.accountant.spent == 1.5


def test_the_seconds_left_in_the_window_are_exported(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.roll(105.5)
    assert ledger.metrics.budget_window_remaining_seconds._value.get() == 14.5
    page = generate_latest(ledger.metrics.registry).decode()
    assert "pufferfish_budget_window_remaining_seconds 14.5" in page.splitlines()


def test_without_windows_nothing_renews(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, window=None)
    ledger.charge_release(2.0)
    ledger.roll(10**9)
    assert ledger.window is None and ledger.accountant.spent == 2.0
    # no window, no gauge: a 0 would read as "renews now"
    assert "pufferfish_budget_window" not in generate_latest(ledger.metrics.registry).decode()
