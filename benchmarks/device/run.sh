#!/usr/bin/env bash
# The figures only the 16-core GPU host gives (issues 14 and 15), stage by stage, each stage's
# output in $OUT/<stage>.txt (the folder the device tool sends back). On the host, from the
# repository root, with the pieces benchmarks/device/pack.sh made carried one per call:
#
#   bash benchmarks/device/run.sh STAGE [STAGE ...]
#   BACKGROUND=1 bash benchmarks/device/run.sh STAGE ...   # the same, left running after the call
#
#   receive   copy the .device/ship/* piece this call carried to /tmp/ship (keep every call's)
#   base      unpack the base-* pieces: TensorFlow, Beam, Keras, simplejpeg under /tmp/site
#             (all that trees, scaling and build need; host, dask and feed need the more-* too)
#   wait      wait for the BACKGROUND=1 run, then add its stages' output to $OUT
#   host      the machine: GPU, CPU, memory, Python and library versions
#   trees     the benchmark trees under $BENCH (8k, 32k, 64k images; every core; ~2 min)
#   scaling   command 7c: coordinator vs workers between the 8k and 64k trees, plain CLI
#   build     command 6 at N = every core: plain CLI, hand-written N-process writer, the limit
#   dask      command 9 at N = every core: a LocalCluster of N workers against the local build
#   feed      command 12/14: ResNet-50 (mixed bfloat16, batch 256) fed by the loader (float32,
#             uint8, DALI on the GPU, tf.data service) against the same model on a cached batch;
#             FEED_ARGS chooses other rows, and $OUT/gpu_use.txt samples the GPU each second
#
# SMALL=1 runs every stage but receive and base on tiny trees with a small model (a check of this
# script on any machine; its figures mean nothing). The call sequence is in
# benchmarks/RESULTS.md ("On the GPU host").
set -euo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
OUT=${OUT:-/tmp/device-out}
BENCH=${BENCH:-/tmp/bench}
mkdir -p "$OUT" "$BENCH"
if [ "${SMALL:-0}" = 1 ]; then
  SIZES=(300 600 1200) FEED=(--model small --batch_size 32 --steps 4 --repeats 1)
  PY=${PYTHON:-python3}
else
  # TREE_SIZES="16000 32000 32000" (small, medium, large) measures other trees
  read -r -a SIZES <<< "${TREE_SIZES:-8000 32000 64000}"
  [ ${#SIZES[@]} = 3 ] || { echo "TREE_SIZES names three trees: small medium large" >&2; exit 2; }
  FEED=(--steps 50 --repeats 3)
  PY=python3
fi
TREE_S=$BENCH/tree${SIZES[0]} TREE_M=$BENCH/tree${SIZES[1]} TREE_L=$BENCH/tree${SIZES[2]}
CORES=$($PY -c "from beam_pipeline.runners.machine import available_cores; print(available_cores())")

base_site() {  # what a build needs: TensorFlow, Beam, Keras, simplejpeg (unpacked by `base`)
  [ "${SMALL:-0}" = 1 ] && return 0
  [ -f /tmp/parts/setup.sh ] || { echo "run the base stage first"; return 1; }
  # setup.sh reads .device/wheels; the device tool's next call removes what is not carried from
  # the checkout's .device/, so it runs from a copy outside it (and puts the checkout on the path).
  local here=$PWD
  [ -f /tmp/devroot/.device/setup.sh ] \
    || { mkdir -p /tmp/devroot/.device && cp -r /tmp/parts/wheels /tmp/parts/setup.sh /tmp/devroot/.device/; }
  cd /tmp/devroot || return 1
  # shellcheck disable=SC1091
  source .device/setup.sh || { cd "$here"; return 1; }
  cd "$here" && export PYTHONPATH="${PYTHONPATH//\/tmp\/devroot/$here}"
}

site() {  # and DALI, nvJPEG, Dask (prepare_extras.sh's archive)
  base_site || return 1
  [ "${SMALL:-0}" = 1 ] && return 0
  if [ ! -f /tmp/site/.extras ]; then
    cat /tmp/ship/more-* | xz -d | tar xf - -C /tmp/site || { echo "more-* pieces incomplete"; return 1; }
    touch /tmp/site/.extras
  fi
}

stage_receive() {
  mkdir -p /tmp/ship
  for piece in .device/ship/*; do [ -f "$piece" ] && cp "$piece" /tmp/ship/; done
  ls -l /tmp/ship
}

stage_base() {
  if [ ! -f /tmp/parts/setup.sh ]; then
    mkdir -p /tmp/parts
    cat /tmp/ship/base-* | tar xf - -C /tmp/parts || { echo "base-* pieces incomplete"; return 1; }
  fi
  base_site && python3 -c "import apache_beam, keras, simplejpeg, tensorflow
print('TensorFlow, Beam, Keras, simplejpeg: ok')"
}

stage_wait() {
  [ -d /tmp/bg-out ] || { echo "no background run"; return 0; }
  while [ ! -f /tmp/bg-out/rc ]; do sleep 2; done
  for file in /tmp/bg-out/*.txt; do [ "$(basename "$file")" = log.txt ] || cp "$file" "$OUT/"; done
  cat /tmp/bg-out/log.txt
  [ "$(cat /tmp/bg-out/rc)" = 0 ] || { tail -20 /tmp/bg-out/background.log; return 1; }
}

stage_host() {
  nvidia-smi || true
  lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket)" || true
  free -g; df -h "$BENCH"
  $PY -c "import sys, numpy, PIL; print(sys.version); print('numpy', numpy.__version__, 'pillow', PIL.__version__)"
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())" || true
  site && $PY -c "
import apache_beam, keras, tensorflow as tf
print('beam', apache_beam.__version__, 'keras', keras.__version__, 'tensorflow', tf.__version__)
import dask, distributed; print('dask', dask.__version__, 'distributed', distributed.__version__)
import nvidia.dali as dali; print('dali', dali.__version__)"
  echo "cores available to a build: $CORES"
}

stage_trees() {
  base_site  # make_tree writes its XML with the builder's own code, which imports Beam
  for i in 0 1 2; do
    tree=$BENCH/tree${SIZES[$i]}
    [ -d "$tree/Data" ] || $PY -m benchmarks.make_tree "$tree" --num_images "${SIZES[$i]}"
  done
  du -sh "$BENCH"/tree*
}

stage_scaling() {
  base_site
  $PY -m benchmarks.scaling "$TREE_S" "$TREE_L" --repeats 1
}

stage_build() {
  base_site
  $PY -m benchmarks.build_benchmark "$TREE_S" "$TREE_M" --repeats 1 --workers "$CORES" \
    --contenders "${CONTENDERS:-ours, plain CLI (no runner flags: every core);baseline: hand-written $CORES-process writer;limit: Pillow image work alone (full decode), $CORES processes, bytes in memory}"
}

stage_dask() {
  site
  $PY -m benchmarks.dask_benchmark "$TREE_S" "$TREE_M" --repeats 1 --workers "$CORES"
}

stage_feed() {
  site
  local out=$BENCH/out${SIZES[1]}
  [ -f "$out/build_info.json" ] || $PY -m beam_pipeline --input_dir "$TREE_M" --output_dir "$out" \
    --splits train --num_shards 64 --quiet
  # FEED_ARGS: the rows after uint8 and DALI's training and evaluation ones (input_bound_benchmark
  # --help), e.g. FEED_ARGS="--no_float32 --dali_row hw_decoder_load=1" (FEED_ARGS="" for none;
  # fast recipes: FEED_ARGS="--image_size 160", "--model efficientnetv2b0 --batch_size 512");
  # the default adds the tf.data service and DALI with its own settings (the loader sets others
  # on the GPU)
  local rows rc=0 sampler=
  read -r -a rows <<< "${FEED_ARGS---service 2 --dali_row hw_decoder_load=0.65,prefetch_batches=2}"
  if command -v nvidia-smi >/dev/null; then  # the GPU's use each second (SMs, JPEG engines)
    nvidia-smi dmon -s u -o T > "$OUT/gpu_use.txt" 2>&1 &
    sampler=$!
  fi
  KERAS_BACKEND=jax $PY -m benchmarks.input_bound_benchmark "$out" "${FEED[@]}" --dali "${rows[@]}" \
    || rc=$?
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  return $rc
}

[ $# -gt 0 ] || { sed -n '2,24p' "$0"; exit 2; }
for stage in "$@"; do
  declare -F "stage_$stage" >/dev/null || { echo "unknown stage $stage" >&2; exit 2; }
done
if [ "${BACKGROUND:-0}" = 1 ]; then  # a new session: the device tool ends the call's processes
  rm -rf /tmp/bg-out && mkdir -p /tmp/bg-out
  BACKGROUND=0 OUT=/tmp/bg-out setsid nohup bash -c 'bash "$0" "$@"; echo $? > /tmp/bg-out/rc' \
    "$0" "$@" > /tmp/bg-out/background.log 2>&1 < /dev/null &
  echo "running in the background: $* (log: /tmp/bg-out/background.log; collect with wait)"
  exit 0
fi
for stage in "$@"; do
  echo "== $stage ($(date -u +%H:%M:%S))" | tee -a "$OUT/log.txt"
  start=$SECONDS
  "stage_$stage" 2>&1 | tee "$OUT/$stage.txt"
  echo "== $stage done in $((SECONDS - start)) s" | tee -a "$OUT/log.txt"
done
