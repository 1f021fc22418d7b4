#!/usr/bin/env bash
# The main job, on DirectRunner, with its own virtual environment (.venv).
#
#   ./run_local.sh
#       Generates the bundled learnable sample (an ILSVRC-DET-style tree of 1,250 images) in
#       sample_data/tree, builds it into sample_data/out with the Beam pipeline, then trains a
#       small Keras CNN from loaders.load_dataset and prints the validation accuracy
#       (fails below 0.9).
#
#   ./run_local.sh --input_dir TREE --output_dir OUT [builder flags]
#       Builds your own tree on DirectRunner (see `./run_local.sh build --help`).
#
#   ./run_local.sh COMMAND ...
#       Any command of `python -m beam_pipeline` (plan, show, inspect, stats, verify; see
#       `./run_local.sh --help`), in the same environment.
set -euo pipefail
CALLER_DIR="$PWD"
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
# This checkout's code, wherever the command runs and whichever checkout the environment
# (VENV=...) was installed from; Beam's worker processes inherit it.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# No runner flags: the builder then runs on FnApiRunner with one worker process per core
# (DirectRunner would first try to download Prism); name a runner or a mode to choose. Run
# from the caller's directory: its relative paths are the user's.
if [ $# -gt 0 ]; then
  cd "$CALLER_DIR"
  exec "$VENV_PYTHON" -m beam_pipeline "$@"
fi

TREE=sample_data/tree
OUT=sample_data/out
if [ ! -d "$TREE" ]; then
  "$VENV_PYTHON" -m beam_pipeline sample "$TREE"
fi
"$VENV_PYTHON" -m beam_pipeline --input_dir "$TREE" --output_dir "$OUT" \
  --num_shards train=4,val=2 --overwrite

# TensorFlow's start-up lines in the training step, none of them an error: INFO lines after its
# logging starts are hidden by TF_CPP_MIN_LOG_LEVEL=1 (2 would hide warnings too, 3 errors);
# those printed before it reads that variable (oneDNN's notice, "Could not find cuda drivers",
# TensorFlow 2.16's "Could not find TensorRT")
# and, where no NVIDIA kernel driver is loaded (no GPU to use), cuInit's failure (an ERROR
# line) are filtered out of its stderr by pattern. Every other line of stderr passes.
quiet_tensorflow() {
  local noise=(
    '^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$'
    '^I[0-9]{4} [0-9:.]+ +[0-9]+ port\.cc:[0-9]+\] oneDNN custom operations are on\. '
    '^I[0-9]{4} [0-9:.]+ +[0-9]+ cudart_stub\.cc:[0-9]+\] Could not find cuda drivers on your machine'
    # TensorFlow 2.16's (the low end setup.py allows), in its older format
    '^[0-9-]+ [0-9:.]+: W tensorflow/compiler/tf2tensorrt/utils/py_utils\.cc:[0-9]+\] TF-TRT Warning: Could not find TensorRT$'
  )
  if [ ! -e /proc/driver/nvidia/version ]; then
    noise+=('^E[0-9]{4} [0-9:.]+ +[0-9]+ cuda_platform\.cc:[0-9]+\] failed call to cuInit: ')
  fi
  local args=()
  for pattern in "${noise[@]}"; do args+=(-e "$pattern"); done
  grep --line-buffered -v -E "${args[@]}" || [ $? -eq 1 ] # 1: it passed no line
}

# stdout as it is (fd 3), stderr through the filter; the exit status is the trainer's (pipefail).
{
  TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}" \
    "$VENV_PYTHON" -m loaders.train_example "$OUT" --min_accuracy 0.9 2>&1 1>&3 3>&- |
    quiet_tensorflow >&2 3>&-
} 3>&1
