#!/usr/bin/env bash
# What --duplicates report costs a build, against a checkout without it, in one run:
#
#   benchmarks/duplicates_cost.sh OLD_CHECKOUT TREE [ROUNDS]
#
# e.g. `git worktree add /tmp/old a94f184` and `python -m benchmarks.make_tree /tmp/t2000
# --num_images 2000`. Runs the plain CLI (--splits train) on TREE from OLD_CHECKOUT, from this
# checkout, and from this checkout with --duplicates report, alternating, ROUNDS times (default
# 3); prints each wall time and the medians' throughput ratios against the old checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD="${1:?usage: benchmarks/duplicates_cost.sh OLD_CHECKOUT TREE [ROUNDS]}"
TREE="${2:?usage: benchmarks/duplicates_cost.sh OLD_CHECKOUT TREE [ROUNDS]}"
ROUNDS="${3:-3}"
PY="$(pwd)/${VENV_PYTHON:-.venv/bin/python}"
HERE="$(pwd)"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
times="$OUT/times"
for _ in $(seq "$ROUNDS"); do
  for side in old default report; do
    dir="$HERE"; [ "$side" = old ] && dir="$OLD"
    flags=(); [ "$side" = report ] && flags=(--duplicates report)
    rm -rf "$OUT/build"
    start=$(date +%s.%N)
    (cd "$dir" && "$PY" -m beam_pipeline --input_dir "$TREE" --splits train \
      --output_dir "$OUT/build" --quiet "${flags[@]}" > /dev/null 2>&1)
    echo "$side $(echo "$(date +%s.%N) - $start" | bc)" | tee -a "$times"
  done
done
"$PY" - "$times" <<'PY'
import collections, statistics, sys
walls = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, seconds = line.split()
    walls[side].append(float(seconds))
median = {side: statistics.median(values) for side, values in walls.items()}
for side in ("default", "report"):
    print(f"{side}: {median['old'] / median[side]:.3f}x the old checkout's throughput")
PY
