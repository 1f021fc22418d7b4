#!/usr/bin/env bash
# What --duplicates report costs a build, against a checkout without it, in one run:
#
#   benchmarks/duplicates_cost.sh OLD_CHECKOUT TREE [ROUNDS]
#
# e.g. `git worktree add /tmp/old a94f184` and `python -m benchmarks.make_tree /tmp/t2000
# --num_images 2000`. Runs the plain CLI (--splits train) on TREE from OLD_CHECKOUT, and from
# this checkout with --duplicates off and with --duplicates report, alternating, ROUNDS times (default
# 3); prints each run's wall and CPU seconds, the medians' throughput ratios against the old
# checkout and report's against off (issue 41's bar: >= 0.95), by wall time and by CPU time (the
# CPU time of the build's processes is steadier where other work shares the machine).
# OLD_FLAGS="--duplicates report" runs the old checkout with those flags (its own cost); OLD_CHECKOUT
# "-" runs off and report only, with each round's report/off ratio and their median (paired).
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
TIMEFORMAT="%R %U %S"  # bash's `time`: wall, then the CPU seconds of the build's processes
for _ in $(seq "$ROUNDS"); do
  sides=(old off report); [ "$OLD" = - ] && sides=(off report)
  for side in "${sides[@]}"; do
    dir="$HERE"; flags=(--duplicates "$side")
    # shellcheck disable=SC2206 # (OLD_FLAGS: words, as typed)
    [ "$side" = old ] && dir="$OLD" && flags=(${OLD_FLAGS:-})
    rm -rf "$OUT/build"
    took=$( { time (cd "$dir" && "$PY" -m beam_pipeline --input_dir "$TREE" --splits train \
      --output_dir "$OUT/build" --quiet "${flags[@]}" > /dev/null 2>&1) ; } 2>&1 )
    echo "$side $took" | tee -a "$times"
  done
done
"$PY" - "$times" <<'PY'
import collections, statistics, sys
walls, cpus = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, wall, user, system = line.split()
    walls[side].append(float(wall))
    cpus[side].append(float(user) + float(system))
for name, values in (("wall", walls), ("CPU", cpus)):
    median = {side: statistics.median(v) for side, v in values.items()}
    for side in ("off", "report") if "old" in median else ():
        print(f"{side}: {median['old'] / median[side]:.3f}x the old checkout's throughput "
              f"({name} time, median of {len(values[side])})")
    print(f"report: {median['off'] / median['report']:.3f}x off's throughput ({name} time)")
    paired = [off / report for off, report in zip(values["off"], values["report"])]
    print(f"  paired, each round's report/off: median {statistics.median(paired):.3f} "
          f"({', '.join(f'{r:.3f}' for r in paired)})")
PY
