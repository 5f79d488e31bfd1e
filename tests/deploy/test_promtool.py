"""Prometheus' own checker on deploy/prometheus (promtool from the Debian package `prometheus`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.deploy.support import PROMETHEUS_CONFIG, RULES_FILE

RULE_TESTS = Path(__file__).with_name("rules_test.yml")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: apt-get install prometheus (scripts/test.sh does)"
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_rules_are_valid() -> None:
    result = _promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_config_is_valid() -> None:
    result = _promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout  # the config really loads rules.yml


def test_alerts_fire_when_and_only_when_expected() -> None:
    result = _promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "groups:\n- name: x\n  rules:\n  - alert: X\n    expr: sum(rate(pufferfish_theta[5m])\n",
        encoding="utf-8",
    )
    assert _promtool("check", "rules", str(bad)).returncode != 0
