"""A build on a Dask cluster against the local build, from the commands users type.

    python -m benchmarks.dask_benchmark bench_data/tree2k bench_data/tree8k [--workers 2]
        [--repeats 2]

Starts a `dask.distributed` LocalCluster of `--workers` single-threaded worker processes on
loopback (default: one per core, like the local build's default), as a user with a running
cluster would have, then builds each tree, alternating in each repeat, with:

- local: the plain CLI, no runner flags (one worker process per core);
- dask: the CLI with `--runner DaskRunner --dask_client_address ADDRESS` (that cluster);
- dask, no address: `--runner DaskRunner` alone (the runner starts a LocalCluster of its own
  and closes it; the start-up a user without a cluster pays).

Prints each contender's fastest wall time per tree, its marginal images/s between the trees
(start-up cancels) and the ratio to the local build's, and checks that the Dask build's output
is byte-identical to the local build's.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sys
import tempfile

from beam_pipeline.runners.machine import available_cores
from benchmarks.build_benchmark import add_tree_pair, ours, tree_sizes
from benchmarks.measure import marginal_rate, run_measured

LOCAL = "local: plain CLI (every core)"
DASK = "dask: --runner DaskRunner --dask_client_address (running cluster)"
DASK_OWN = "dask: --runner DaskRunner, no address (starts its own LocalCluster)"


def digests(output_dir: str) -> dict[str, str]:
    """SHA-256 of every file a build left, by relative path (its scratch directory aside)."""
    found = {}
    for directory, subdirectories, names in os.walk(output_dir):
        subdirectories[:] = [d for d in subdirectories if d != ".tmp"]
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as stream:
                found[os.path.relpath(path, output_dir)] = hashlib.sha256(stream.read()).hexdigest()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_pair(parser)
    parser.add_argument("--workers", type=int, default=available_cores())
    parser.add_argument("--repeats", type=int, default=1, help="Runs per tree; the fastest counts.")
    parser.add_argument("--no_own_cluster", action="store_true", help=f"Skip '{DASK_OWN}'.")
    args = parser.parse_args()
    n_small, n_large = tree_sizes(parser, args)

    from dask.distributed import LocalCluster

    work = tempfile.mkdtemp(prefix="bench-dask-")
    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    flags = {
        LOCAL: [],
        DASK: ["--runner", "DaskRunner", "--dask_client_address", cluster.scheduler_address],
        DASK_OWN: ["--runner", "DaskRunner"],
    }
    if args.no_own_cluster:
        del flags[DASK_OWN]
    trees = [args.small_tree, args.large_tree]
    outputs = {name: os.path.join(work, f"out{i}") for i, name in enumerate(flags)}
    runs = {name: [[], []] for name in flags}
    identical = True
    try:
        for _ in range(args.repeats):
            for position, tree in enumerate(trees):
                for name, extra in flags.items():
                    runs[name][position].append(
                        run_measured(ours(tree, outputs[name], extra, False))
                    )
                reference = digests(outputs[LOCAL])
                identical &= all(digests(out) == reference for out in outputs.values())
                for out in outputs.values():
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)

    best = {
        name: [min(r, key=lambda m: m.seconds) for r in per_tree] for name, per_tree in runs.items()
    }
    local_rate = marginal_rate(n_small, best[LOCAL][0], n_large, best[LOCAL][1])
    print(f"{args.workers} Dask workers x 1 thread; local build on {available_cores()} cores")
    print(
        f"| contender | {n_small} imgs s | {n_large} imgs s | marginal img/s | "
        f"this / local (marginal) | this / local ({n_large} wall) |"
    )
    print("|---|---|---|---|---|---|")
    for name, (small, large) in best.items():
        rate = marginal_rate(n_small, small, n_large, large)
        ratio = rate / local_rate if local_rate and not math.isnan(rate) else math.nan
        wall = best[LOCAL][1].seconds / large.seconds
        shown_rate = "-" if math.isnan(rate) else f"{rate:.0f}"
        print(
            f"| {name} | {small.seconds:.1f} | {large.seconds:.1f} | {shown_rate} | "
            f"{'-' if math.isnan(ratio) else f'{ratio:.2f}'} | {wall:.2f} |"
        )
    print(f"byte-identical to the local build: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
