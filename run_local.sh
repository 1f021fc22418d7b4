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
cd "$(dirname "$0")"
source scripts/ensure_venv.sh

# No runner flags: the builder then runs on FnApiRunner with one worker process per core
# (DirectRunner would first try to download Prism); name a runner or a mode to choose.
if [ $# -gt 0 ]; then
  exec "$VENV_PYTHON" -m beam_pipeline "$@"
fi

TREE=sample_data/tree
OUT=sample_data/out
if [ ! -d "$TREE" ]; then
  "$VENV_PYTHON" -m beam_pipeline sample "$TREE"
fi
"$VENV_PYTHON" -m beam_pipeline --input_dir "$TREE" --output_dir "$OUT" \
  --num_shards train=4,val=2 --overwrite
"$VENV_PYTHON" -m loaders.train_example "$OUT" --min_accuracy 0.9
