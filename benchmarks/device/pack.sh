#!/usr/bin/env bash
# Packs what ../shared/device/make_parts.sh and benchmarks/device/prepare_extras.sh wrote into
# .device/ as few transfers to the GPU host as the device tool allows (one call carries the
# working tree, ~3 MB, and at most 64 MiB in all), in two streams of 60 MiB pieces:
#   .device/ship/base-aa, base-ab, ...   TensorFlow's pieces, the wheels (Beam, Keras, simplejpeg)
#                                        and setup.sh: all that the trees and every build need
#   .device/ship/more-aa, more-ab, ...   the extras' xz archive (DALI, nvJPEG, Dask)
# Carry one piece per call, base first, and start each command with `bash
# benchmarks/device/run.sh receive`; the call sequence is in benchmarks/RESULTS.md ("On the GPU
# host"). Run from the project root after both scripts; takes seconds (nothing is recompressed).
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
[ -f .device/setup.sh ] && [ -d .device/wheels ] && compgen -G ".device/part-*" >/dev/null \
  || { echo "run ../shared/device/make_parts.sh first" >&2; exit 1; }
compgen -G ".device/extra-*" >/dev/null \
  || { echo "run benchmarks/device/prepare_extras.sh first" >&2; exit 1; }
rm -rf .device/ship && mkdir .device/ship
(cd .device && tar cf - part-* wheels setup.sh) | split -b 60M - .device/ship/base-
cat .device/extra-* | split -b 60M - .device/ship/more-
ls -l .device/ship
echo "$(find .device/ship -type f | wc -l) transfers: carry each .device/ship/* in its own call, base-* first"
