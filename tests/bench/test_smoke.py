"""Smoke runs of every benchmark at tiny sizes (no timing assertions): they must not rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as dispatcher
from bench import latency, memory, recalibration, throughput, utility


def run(module: object, tmp_path: Path, *extra: str) -> str:
    results = tmp_path / "RESULTS.md"
    assert module.main(["--quick", "--results", str(results), *extra]) == 0  # type: ignore[attr-defined]
    return results.read_text()


def test_list_names_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatcher.main(["--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert listed == {"throughput", "recalibration", "memory", "utility", "latency", "core_rules"}


def test_unknown_benchmark_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatcher.main(["nope"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_recalibration_quick(tmp_path: Path) -> None:
    text = run(recalibration, tmp_path, "--repeats", "2")
    assert "<!-- bench:recalibration start -->" in text
    assert "Release plan time vs G and K" in text and "flatness in N" in text
    # one release_plan row per (rule, K, G): G = 1 calibrates (P_g, delta_0) only
    for rule in ("exact", "kantorovich", "bound", "relaxed"):
        assert f"| {rule} | 4 | 1 | presence | 1 | 2 |" in text
        assert f"| {rule} | 16 | 2 | presence+change | 4 | 2 |" in text
    # the ingest rows: every generated record is valid (0 dead letters)
    assert "| 100 | 16 | 2000 | 2 | 100 | 0 |" in text
    assert "| 1e+03 | 16 | 2000 | 2 |" in text


def test_memory_quick(tmp_path: Path) -> None:
    text = run(memory, tmp_path)
    assert "| memory | 2e+03 | 16 |" in text
    assert "| aggregate only | 2e+03 | 16 |" in text


def test_utility_quick(tmp_path: Path) -> None:
    text = run(utility, tmp_path)
    assert "(pass: yes)" in text
    # S_(a,b) with a=5, b=3 on the toy domain {1..5}: every rule gives 2/eps, DP gives 4/eps
    assert "| paper 4-user | S_(a,b) a=5 b=3 | 0.5 | 8 | 4 (0.500) |" in text


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_throughput_quick(tmp_path: Path) -> None:
    text = run(throughput, tmp_path)
    assert "**Ratio worker / raw =" in text


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_latency_quick(tmp_path: Path) -> None:
    text = run(latency, tmp_path)
    assert "| light |" in text and "| saturating |" in text
