"""Smoke runs of every benchmark at tiny sizes (no timing assertions): they must not rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as dispatcher
from bench import (
    backlog,
    composition,
    continual,
    latency,
    memory,
    recalibration,
    recovery,
    robust,
    throughput,
    utility,
)


def run(module: object, tmp_path: Path, *extra: str) -> str:
    results = tmp_path / "RESULTS.md"
    assert module.main(["--quick", "--results", str(results), *extra]) == 0  # type: ignore[attr-defined]
    return results.read_text()


def test_list_names_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatcher.main(["--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert listed == {
        "throughput", "recalibration", "memory", "utility", "latency", "core_rules", "robust",
        "composition", "continual", "backlog", "recovery", "chaos",
    }


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


def test_robust_quick(tmp_path: Path) -> None:
    text = run(robust, tmp_path)
    assert "<!-- bench:robust start -->" in text and "(pass: yes)" in text
    # the paper's P_4 (K = 5): plain theta 3.47 at eps 1; eps_learn 0.1 at n = 100 is void
    # (T = 469 users) -> the worst case 5 = max|x| / eps
    assert "| paper 4-user | S_(P,perp) P_4 | 1 | 0.1 | 3.47 | 5 | 5 (1.441 void) |" in text
    # the floor term 2 alpha (K - 1) / K = 0.08 at K = 5 bounds the ratio away from 1
    assert "| 5 | paper change, paper presence | 1 |" in text and "| 0.0800 |" in text
    assert "**Conclusion**" in text


def test_composition_quick(tmp_path: Path) -> None:
    text = run(composition, tmp_path)
    assert "<!-- bench:composition start -->" in text
    assert "Every exact loss is at most the pointwise charge: yes" in text
    # P_4 vs delta_0 at eps 1: theta 3.4698, charge 5 / theta = 1.441; two releases of a
    # persistent value cost 2.216 (docs/privacy.md, "Composition"), i.i.d. values 2 * 1
    assert "| paper 4-user | S_(P,perp) P_4 | 1 | 3.47 | 1.441 | 2 | 2 | 2.882 | 2.216 | 2.000 |" \
        in text
    # Bernoulli(0.2) vs (0.9): the persistent loss saturates at log 8 = 2.079, i.i.d. is 10
    assert "| 10 | 10 | 14.477 | 2.079 | 10.000 | 10.000 | 0.144 |" in text


def test_continual_quick(tmp_path: Path) -> None:
    text = run(continual, tmp_path)
    assert "<!-- bench:continual start -->" in text and "not run (--quick)" in text
    # spread 16 (value_presence on 1..16); w 0: the base alone, Delta = 16, theta = 16/eps 1;
    # w 1, T 360, arity 8: levels of 1, 8 and 64 ticks, one move of 16 each: 16 + 3 * 16 = 64
    assert "| 360 | 0 | 800 | 2 | 16 | 16 |" in text
    assert "| 360 | 1 | 20 | 8 | 64 | 64 |" in text


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_throughput_quick(tmp_path: Path) -> None:
    text = run(throughput, tmp_path)
    assert "**Ratio worker / raw =" in text
    assert "| stock Faust, recipe | 1 | 400 |" in text and "worker / stock Faust recipe = " in text
    # the worker's rows split its CPU: the input path's part is read from its metric
    row = next(line for line in text.splitlines()
               if line.startswith("| pufferfish worker, 1 process |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    cpu, input_cpu = float(cells[7].replace(",", "")), float(cells[8].replace(",", ""))
    assert 0 < input_cpu < cpu
    recipe = next(line for line in text.splitlines() if line.startswith("| recipe:"))
    assert recipe.strip("|").split("|")[8].strip() == "n/a"


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_latency_quick(tmp_path: Path) -> None:
    text = run(latency, tmp_path)
    assert "| light |" in text and "| saturating |" in text


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_backlog_quick(tmp_path: Path) -> None:
    text = run(backlog, tmp_path, "--passes", "1")
    assert "<!-- bench:backlog start -->" in text
    assert "| 1,000 reports, plain |" in text
    assert "| 1,000 reports, 100 transactions x 10 |" in text
    assert "transactional / plain:" in text


@pytest.mark.integration
@pytest.mark.slow
def test_recovery_quick(tmp_path: Path) -> None:
    text = run(recovery, tmp_path, "--brokers", "tansu", "--stores", "rocksdb",
               "--kill", "sigterm", "sigkill")
    assert "<!-- bench:recovery start -->" in text
    for stop in ("SIGTERM", "SIGKILL"):
        row = next(line for line in text.splitlines()
                   if line.startswith(f"| tansu | rocksdb | {stop} | 500 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(c != "n/a" for c in [*cells[:12], *cells[-3:]]), row  # every wait ended
        assert cells[-2] == "0", row  # no tick of the public clock missed during the recovery
