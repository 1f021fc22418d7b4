"""Build throughput and peak memory: our pipeline and the baselines, 2k vs 8k images, one run.

    python -m benchmarks.make_tree bench_data/tree2k --num_images 2000
    python -m benchmarks.make_tree bench_data/tree8k --num_images 8000
    python -m benchmarks.build_benchmark bench_data/tree2k bench_data/tree8k \\
        [--resize] [--repeats 3] [--workers N] [--contenders "NAME;NAME"]

Prints, per contender: wall seconds at 2k and 8k, the marginal images/s between them, peak
memory of the whole process tree at 2k and 8k, the 8k/2k memory ratio, and how many times faster
the first of our contenders is. Baselines (benchmarks.baselines): a naive single loop, a
hand-written N-process sharded writer, Beam with the image bytes through the shuffle (given N
worker processes, and with the runner's defaults: in memory, one worker), and the limit:
Pillow's image work alone on N processes over bytes in memory (its rate uses the work time
the script reports, not wall time). N is --workers, 2 by default.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import sys
import tempfile

from benchmarks.measure import marginal_rate, run_measured


def contenders(workers: int = 2) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(ours: name -> build flags, baselines: name -> `benchmarks.baselines` arguments) for
    N = `workers` (the names say N; with 2 they are the names RESULTS.md has used throughout)."""
    n = ["--direct_num_workers", str(workers)]
    processes = ["--processes", str(workers)]
    modes = {
        "ours, plain CLI (no runner flags: every core)": [],
        "ours, in_memory": ["--direct_running_mode", "in_memory"],
        f"ours, multi_threading x{workers}": ["--direct_running_mode", "multi_threading", *n],
        f"ours, multi_processing x{workers}": ["--direct_running_mode", "multi_processing", *n],
    }
    baselines = {
        "baseline: naive single loop": ["naive"],
        f"baseline: hand-written {workers}-process writer": ["nproc", *processes],
        "baseline: Beam, image bytes through GroupByKey": ["beam_gbk", *processes],
        "baseline: Beam, image bytes through GroupByKey, runner defaults (1 worker)": [
            "beam_gbk_defaults"
        ],
        limit_name(workers): ["limit", *processes],
    }
    return modes, baselines


def limit_name(workers: int = 2) -> str:
    return f"limit: Pillow image work alone (full decode), {workers} processes, bytes in memory"


LIMIT = limit_name()
MODES, BASELINES = contenders()
OURS = "ours, multi_processing x2"


def count_images(tree: str) -> int:
    return sum(len(files) for _, _, files in os.walk(os.path.join(tree, "Data")))


def add_tree_pair(parser: argparse.ArgumentParser) -> None:
    """The two trees every marginal-rate benchmark takes, the smaller first."""
    parser.add_argument("small_tree")
    parser.add_argument("large_tree")


def tree_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[int, int]:
    """(images in small_tree, in large_tree); a usage error unless the large tree is larger."""
    n_small, n_large = count_images(args.small_tree), count_images(args.large_tree)
    if n_large <= n_small:
        parser.error(f"large_tree has {n_large} images, small_tree {n_small}: it needs more")
    return n_small, n_large


def command(name: str, tree: str, out: str, resize: bool, workers: int = 2) -> list[str]:
    """The command line that builds `tree` into `out` as contender `name` (N = `workers`)."""
    modes, baselines = contenders(workers)
    if name in baselines:
        kind, *flags = baselines[name]
        script = [sys.executable, "-m", "benchmarks.baselines"]
        return [*script, kind, tree, out, *flags, *(["--resize"] if resize else [])]
    return ours(tree, out, modes[name], resize)


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


def measure(
    name: str, trees: list[str], resize: bool, repeats: int, work: str, workers: int = 2
) -> list:
    """Contender `name`'s fastest run on each tree, the trees alternating in each repeat."""
    runs = [[] for _ in trees]
    for _ in range(repeats):
        for tree, measured in zip(trees, runs, strict=True):
            out = os.path.join(work, "out")
            run = run_measured(command(name, tree, out, resize, workers))
            if name == limit_name(workers):  # the image work alone, as the script reports it
                seconds = float(run.output.split("work_seconds=")[1].split()[0])
                run = dataclasses.replace(run, seconds=seconds)
            measured.append(run)
            shutil.rmtree(out, ignore_errors=True)
    # Fastest of the repeats: noise on a shared machine only ever adds time.
    return [min(measured, key=lambda m: m.seconds) for measured in runs]


def _number(value: float, spec: str) -> str:
    """`value` formatted, or "-" where there is no figure (NaN: see `marginal_rate`)."""
    return "-" if math.isnan(value) else format(value, spec)


def print_table(n_small: int, n_large: int, rows: dict) -> None:
    """One row per contender: {name: (small run, large run, marginal rate)}; the last column is
    the first of our contenders' marginal rate over each one's, named below the table."""
    ours = next((name for name in rows if name.startswith("ours")), None)
    ours_rate = rows[ours][2] if ours else math.nan
    print(
        f"| contender | {n_small} imgs s | {n_large} imgs s | marginal img/s | peak MiB {n_small} "
        f"| peak MiB {n_large} | mem ratio | ours / this |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (small, large, rate) in rows.items():
        m_small, m_large = small.peak_rss_bytes, large.peak_rss_bytes
        print(
            f"| {name} | {small.seconds:.1f} | {large.seconds:.1f} | {_number(rate, '.0f')} "
            f"| {m_small / 2**20:.0f} | {m_large / 2**20:.0f} | {m_large / m_small:.2f} "
            f"| {_number(ours_rate / rate, '.2f')} |"
        )
    print(f"\nours: {ours or 'no contender of ours ran'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_pair(parser)
    parser.add_argument("--resize", action="store_true", help="Shorter side to 256.")
    parser.add_argument("--repeats", type=int, default=1, help="Runs per tree; the fastest counts.")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="N for the N-worker contenders (ours x N, the N-process writer, the limit)",
    )
    parser.add_argument("--contenders", help="Names separated by ; (default: all of them).")
    args = parser.parse_args()
    modes, baselines = contenders(args.workers)
    names = args.contenders.split(";") if args.contenders else [*modes, *baselines]
    unknown = [name for name in names if name not in modes and name not in baselines]
    if unknown:
        parser.error(f"unknown contenders {unknown}; known: {[*modes, *baselines]}")
    n_small, n_large = tree_sizes(parser, args)
    work = tempfile.mkdtemp(prefix="bench-")
    rows = {}
    try:
        for name in names:
            trees = [args.small_tree, args.large_tree]
            small, large = measure(name, trees, args.resize, args.repeats, work, args.workers)
            rows[name] = small, large, marginal_rate(n_small, small, n_large, large)
            print(f"done: {name}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(n_small, n_large, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
