# Sourced by scripts/demo.sh and scripts/start-tansu.sh (not run on its own): the project's .venv.
#   ensure_venv EXTRA MODULE...
# In the current directory (the repository root): creates .venv with ${PYTHON:-python3} when it
# is missing, and installs the project with EXTRA (pip install -e ".[EXTRA]") when .venv cannot
# import every MODULE or has no `pufferfish` command. Messages go to stderr (stdout stays the
# caller's). Returns non-zero when a step fails.

ensure_venv() {
  local extra=$1 venv=.venv imports
  shift
  imports=$(IFS=,; echo "$*")
  if [ ! -x "$venv/bin/python" ]; then
    echo "==> creating $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv" >&2 || return 1
  fi
  # -I: the check must not find the package through the current directory
  if ! "$venv/bin/python" -I -c "import $imports" >/dev/null 2>&1 \
      || ! [ -x "$venv/bin/pufferfish" ]; then
    echo "==> installing the project with [$extra] into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2 || return 1
    "$venv/bin/python" -m pip install --quiet -e ".[$extra]" >&2 || return 1
  fi
}
