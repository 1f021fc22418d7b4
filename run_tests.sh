#!/usr/bin/env bash
# The test command: sets up .venv if needed, then lint, the type checker and the whole test
# suite.
#   ./run_tests.sh            all tests (what CI runs)
#   ./run_tests.sh -m "not slow"   the fast ones; any pytest arguments pass through
# Tests run on PYTEST_WORKERS worker processes (pytest-xdist; default 2, 0 for one process).
set -euo pipefail
cd "$(dirname "$0")"
TEST_REQUIREMENTS=1 source scripts/ensure_venv.sh
"$VENV_PYTHON" -m ruff check .
"$VENV_PYTHON" -m ruff format --check .
"$VENV_PYTHON" -m mypy
exec "$VENV_PYTHON" -m pytest -n "${PYTEST_WORKERS:-2}" "$@"
