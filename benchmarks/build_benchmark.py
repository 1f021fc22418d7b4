"""Build throughput and peak memory: our pipeline and the baselines, 2k vs 8k images, one run.

    python benchmarks/make_tree.py bench_data/tree2k --num_images 2000
    python benchmarks/make_tree.py bench_data/tree8k --num_images 8000
    python benchmarks/build_benchmark.py bench_data/tree2k bench_data/tree8k \\
        [--resize] [--repeats 3]

Prints, per contender: wall seconds at 2k and 8k, the marginal images/s between them, peak
memory of the whole process tree at 2k and 8k, the 8k/2k memory ratio, and how many times faster
our multi-process build is. Baselines (benchmarks/baselines.py): a naive single loop, a
hand-written 2-process sharded writer, Beam with the image bytes through the shuffle (given two
worker processes, and with the runner's defaults: in memory, one worker), and the limit:
Pillow's image work alone on two processes over bytes in memory (its rate uses the work time
the script reports, not wall time).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile

from measure import marginal_rate, run_measured

LIMIT = "limit: Pillow image work alone (full decode), 2 processes, bytes in memory"
_WORKERS = ["--direct_num_workers", "2"]
MODES = {
    "ours, in_memory": ["--direct_running_mode", "in_memory"],
    "ours, multi_threading x2": ["--direct_running_mode", "multi_threading", *_WORKERS],
    "ours, multi_processing x2": ["--direct_running_mode", "multi_processing", *_WORKERS],
}
BASELINES = {
    "baseline: naive single loop": "naive",
    "baseline: hand-written 2-process writer": "twoproc",
    "baseline: Beam, image bytes through GroupByKey": "beam_gbk",
    "baseline: Beam, image bytes through GroupByKey, runner defaults (1 worker)": (
        "beam_gbk_defaults"
    ),
    LIMIT: "limit",
}
OURS = "ours, multi_processing x2"
HERE = os.path.dirname(os.path.abspath(__file__))


def count_images(tree: str) -> int:
    return sum(len(files) for _, _, files in os.walk(os.path.join(tree, "Data")))


def command(name: str, tree: str, out: str, resize: bool) -> list[str]:
    if name in BASELINES:
        script = os.path.join(HERE, "baselines.py")
        return [
            sys.executable,
            script,
            BASELINES[name],
            tree,
            out,
            *(["--resize"] if resize else []),
        ]
    return ours(tree, out, MODES[name], resize)


def ours(tree: str, out: str, mode: list[str], resize: bool) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "beam_pipeline",
        "--input_dir",
        tree,
        "--output_dir",
        out,
        "--splits",
        "train",
        "--num_shards",
        "16",
        "--overwrite",
        *mode,
    ]
    if resize:
        command += ["--image_policy", "shorter_side", "--image_size", "256"]
    return command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("small_tree")
    parser.add_argument("large_tree")
    parser.add_argument("--resize", action="store_true", help="Shorter side to 256.")
    parser.add_argument("--repeats", type=int, default=1, help="Runs per tree; the fastest counts.")
    parser.add_argument(
        "--contenders", default=";".join([*MODES, *BASELINES]), help="Names separated by ;."
    )
    args = parser.parse_args()
    sizes = {tree: count_images(tree) for tree in (args.small_tree, args.large_tree)}
    work = tempfile.mkdtemp(prefix="bench-")
    rows = []
    try:
        for name in args.contenders.split(";"):
            runs = {tree: [] for tree in (args.small_tree, args.large_tree)}
            for _ in range(args.repeats):
                for tree in runs:
                    out = os.path.join(work, "out")
                    run = run_measured(command(name, tree, out, args.resize))
                    if name == LIMIT:  # the image work alone, as the script reports it
                        seconds = float(run.output.split("work_seconds=")[1].split()[0])
                        run = dataclasses.replace(run, seconds=seconds)
                    runs[tree].append(run)
                    shutil.rmtree(out, ignore_errors=True)
            # Fastest of the repeats: noise on a shared machine only ever adds time.
            runs = {tree: min(measured, key=lambda m: m.seconds) for tree, measured in runs.items()}
            small, large = runs[args.small_tree], runs[args.large_tree]
            rate = marginal_rate(sizes[args.small_tree], small, sizes[args.large_tree], large)
            rows.append(
                (
                    name,
                    small.seconds,
                    large.seconds,
                    rate,
                    small.peak_rss_bytes,
                    large.peak_rss_bytes,
                )
            )
            print(f"done: {name}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n_small, n_large = sizes[args.small_tree], sizes[args.large_tree]
    ours_rate = next((row[3] for row in rows if row[0] == OURS), None)
    print(
        f"| contender | {n_small} imgs s | {n_large} imgs s | marginal img/s | peak MiB {n_small} "
        f"| peak MiB {n_large} | mem ratio | ours x2 / this |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, s_small, s_large, rate, m_small, m_large in rows:
        speedup = f"{ours_rate / rate:.2f}" if ours_rate else "-"
        print(
            f"| {name} | {s_small:.1f} | {s_large:.1f} | {rate:.0f} | {m_small / 2**20:.0f} "
            f"| {m_large / 2**20:.0f} | {m_large / m_small:.2f} | {speedup} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
