"""`plan` against the build it describes, on one tree, as a user types both.

    python -m benchmarks.make_tree bench_data/tree10k --num_images 10500   # ~20k files
    python -m benchmarks.plan_benchmark bench_data/tree10k --splits train --repeats 3

Rows, alternating, fastest of `--repeats` runs each (wall seconds of the whole command, start-up
included, and the peak memory of its process tree):
  plan          python -m beam_pipeline plan --input_dir TREE
  plan --json   the same, printing every count and rejection as JSON
  build         python -m beam_pipeline --input_dir TREE --output_dir OUT --overwrite (the
                plain CLI: every core)
Then the plan's files listed per second and plan / build as a fraction.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from benchmarks.measure import run_measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree")
    parser.add_argument("--splits", default="train,val", help="the tree's splits (--splits)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as work:
        out = os.path.join(work, "out")
        tree = ["--input_dir", args.tree, "--splits", args.splits]
        commands = {
            "plan": [python, "-m", "beam_pipeline", "plan", *tree],
            "plan --json": [python, "-m", "beam_pipeline", "plan", *tree, "--json"],
            "build": [python, "-m", "beam_pipeline", *tree, "--output_dir", out, "--overwrite"],
        }
        runs = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                runs[name].append(run_measured(command))
    best = {name: min(got, key=lambda m: m.seconds) for name, got in runs.items()}
    plan = json.loads(best["plan --json"].output[best["plan --json"].output.index("{") :])
    files = plan["files_listed"]
    images = sum(split["images"] for split in plan["splits"].values())
    print(f"tree {args.tree}: {files:,} files, {images:,} images; fastest of {args.repeats}")
    print()
    print("| command | seconds | peak MiB | files/s | / build |")
    print("|---|---|---|---|---|")
    for name, measured in best.items():
        print(
            f"| {name} | {measured.seconds:.2f} | {measured.peak_rss_bytes / 2**20:,.0f} | "
            f"{files / measured.seconds:,.0f} | {measured.seconds / best['build'].seconds:.3f} |"
        )
    print()
    print(f"plan's own index time (in the JSON): {plan['seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
