#!/usr/bin/env bash
# The test suite on the oldest versions setup.py allows (requirements-oldest.txt), in its own
# environment (.venv-oldest): a range in setup.py is a promise, and this is how it is kept.
#
#   scripts/test_oldest.sh                 the fast tests (-m "not slow") on the low ends
#   scripts/test_oldest.sh -m slow         the others; any pytest arguments instead
#
# The tests of what only the pinned test environment has are left out (below): their subjects
# are not in setup.py's ranges.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV_OLDEST:-.venv-oldest}"
PYTHON="${PYTHON:-python3}"
stamp="$VENV/.installed-$(cat requirements-oldest.txt setup.py | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "Setting up $VENV with the oldest versions setup.py allows..."
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -r requirements-oldest.txt \
    pytest==9.2.0 hypothesis==6.170.15 psutil==7.2.2
  "$VENV/bin/python" -m pip install --quiet --no-deps -e .
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
"$VENV/bin/python" -m pip freeze | grep -iE "^(apache-beam|pillow|simplejpeg|lxml|numpy|google-crc32c|protobuf|rich|tensorflow|dask|distributed|matplotlib)==" \
  | tr '\n' ' '
echo
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# What only the pinned test environment has: DALI, TFDS, the docs' tools, the Model Garden,
# PyTorch's and JAX's Keras backends.
left_out=(
  --ignore=tests/test_dali.py --ignore=tests/test_tfds.py --ignore=tests/test_docs.py
  -k "not (model_garden or pytorch_snippet or dali_snippet or tfds_snippet or other_keras_backends or feeds_dali)"
)
if [ $# -eq 0 ]; then
  set -- -m "not slow"
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "${left_out[@]}" "$@"
