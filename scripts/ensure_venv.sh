#!/usr/bin/env bash
# Creates (once) the project's virtual environment in .venv and installs the pinned
# requirements and the project itself; reinstalls only when requirements.txt or setup.py
# change. Source it: `source scripts/ensure_venv.sh`, then $VENV_PYTHON is the interpreter.
# With TEST_REQUIREMENTS=1 (./run_tests.sh) it also installs requirements-test.txt, and
# requirements-test-nodeps.txt without the dependencies its packages declare. With
# VENV_PYTHON already set (an interpreter whose environment the caller made: the tests run the
# scripts with their own, the oldest versions' too) it does nothing.
set -euo pipefail
if [ -n "${VENV_PYTHON:-}" ]; then
  return 0
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "error: Python >= 3.10 is needed ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
stamp="$VENV/.installed-$(cat "$ROOT/requirements.txt" "$ROOT/setup.py" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "Setting up $VENV (first run: downloads Apache Beam and TensorFlow, a few minutes)..."
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -r "$ROOT/requirements.txt"
  "$VENV/bin/python" -m pip install --quiet --no-deps -e "$ROOT"
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
if [ "${TEST_REQUIREMENTS:-0}" = 1 ]; then
  tests="$VENV/.tests-installed-$(cat "$ROOT/requirements.txt" "$ROOT/requirements-test.txt" \
    "$ROOT/requirements-test-nodeps.txt" | sha256sum | cut -c1-16)"
  if [ ! -f "$tests" ]; then
    echo "Installing the test requirements into $VENV..."
    "$VENV/bin/python" -m pip install --quiet -r "$ROOT/requirements.txt" \
      -r "$ROOT/requirements-test.txt"
    "$VENV/bin/python" -m pip install --quiet --no-deps -r "$ROOT/requirements-test-nodeps.txt"
    rm -f "$VENV"/.tests-installed-*
    touch "$tests"
  fi
fi
VENV_PYTHON="$VENV/bin/python"
export VENV_PYTHON
# Quieter TensorFlow start-up logs.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
