#!/usr/bin/env bash
# Builds three trees with the checkout's code and lists the SHA-256 of every file written, so
# that a refactor can show it changes nothing a build writes: run it before and after, diff.
#
#   scripts/check_byte_identity.sh WORK_DIR > before.sha     (on the old commit)
#   scripts/check_byte_identity.sh WORK_DIR > after.sha      (on the new one)
#   diff before.sha after.sha && echo byte-identical
#
# The trees (made once in WORK_DIR/trees, with the same code each time): the bundled sample
# (1,250 images, train=4,val=2 shards); the sample plus the damaged JPEGs of
# tests/data/fuzz_cases and fuzz_seeds, built with --keep_stray_jpeg_bytes and an open error
# budget (rejections, kept mended copies); a 400-image benchmark tree resized to a shorter side
# of 96. Needs .venv (./run_local.sh or ./run_tests.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${1:?usage: scripts/check_byte_identity.sh WORK_DIR}"
PY="${VENV_PYTHON:-.venv/bin/python}"
trees="$WORK/trees"
if [ ! -d "$trees" ]; then
  mkdir -p "$trees"
  "$PY" -m beam_pipeline sample "$trees/sample" > /dev/null
  cp -r "$trees/sample" "$trees/damaged"
  for f in tests/data/fuzz_cases/*.jpg tests/data/fuzz_seeds/*.jpg; do
    cp "$f" "$trees/damaged/Data/DET/train/sample_train/zz_$(basename "$f" .jpg).JPEG"
  done
  "$PY" -m benchmarks.make_tree "$trees/t400" --num_images 400 > /dev/null
fi
out="$WORK/out"
rm -rf "$out"
mkdir -p "$out"
build() {
  local name=$1
  shift
  "$PY" -m beam_pipeline --output_dir "$out/$name" "$@" > "$WORK/$name.log" 2>&1
}
build sample --input_dir "$trees/sample" --num_shards train=4,val=2
build damaged --input_dir "$trees/damaged" --keep_stray_jpeg_bytes --max_bad_fraction 1
build t400 --input_dir "$trees/t400" --image_policy shorter_side --image_size 96 --splits train
(cd "$out" && find . -type f | sort | xargs sha256sum)
