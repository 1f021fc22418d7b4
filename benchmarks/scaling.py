"""Where a local build's CPU goes as workers are added: the coordinator's share, each worker's
busy time, and the fixed start-up, from the command users type.

    python -m benchmarks.scaling bench_data/tree2k bench_data/tree8k [--workers N] [--repeats 2]
        [--runner local|dask]

Runs the plain CLI (no runner flags: one worker process per core; `--workers N` adds
`--direct_num_workers N`) on both trees and on a tiny one, sampling every process of the build
every 50 ms: the launcher, which is Beam's coordinator (FnApiRunner: it plans, moves every
element between stages over gRPC and runs the index stages' shuffles), and each SDK worker
process. Per tree: wall time, the coordinator's CPU seconds, each worker's CPU seconds and busy
fraction (CPU / wall), and the imbalance between workers (max / mean). Between the two trees
(marginal, so start-up cancels): the coordinator's and the workers' CPU per image, and the
serial fraction f = coordinator / (coordinator + workers). The coordinator is one process that
every element passes through, so it bounds the build as Amdahl's serial part does: the
efficiency at N workers is at most 1 / (N f + 1 - f), printed for 16 and 64. Start-up is the
tiny tree's wall time (20 images) and the small tree's wall time minus its images at the
marginal rate.

`--runner dask` measures `--runner DaskRunner` the same way: the build starts a LocalCluster
of one single-threaded worker process per core; the launcher holds the Dask scheduler and the
client (it plans tasks, not elements: the workers exchange the data), the workers are its
multiprocessing children.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from beam_pipeline.tools import sample_tree
from benchmarks.build_benchmark import add_tree_pair, ours, tree_sizes


@dataclasses.dataclass(frozen=True)
class Sampled:
    seconds: float
    coordinator_cpu: float
    worker_cpu: tuple[float, ...]  # one per SDK worker process
    total_cpu: float  # the whole process tree, from the kernel (rusage), to check coverage


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _is_worker(process: psutil.Process, runner: str) -> bool:
    """A process that runs the pipeline's elements: FnApiRunner's SDK worker, or a Dask worker
    process (multiprocessing's child; not its resource tracker). A wrapper process whose command
    line names the worker is dropped later, once seen as a worker's parent (`run_sampled`)."""
    line = " ".join(process.cmdline())
    if runner == "dask":
        return "multiprocessing" in line and "resource_tracker" not in line
    return "sdk_worker_main" in line


def run_sampled(command: list[str], interval: float = 0.05, runner: str = "local") -> Sampled:
    """Runs `command`, sampling the CPU time of it and of each of its worker processes."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(process.pid)
    coordinator, workers, parents = 0.0, {}, set()
    while process.poll() is None:
        with contextlib.suppress(psutil.Error):
            coordinator = _cpu(root)
            for child in root.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if _is_worker(child, runner):
                        workers[child.pid] = _cpu(child)
                        parents.add(child.ppid())
        time.sleep(interval)
    # A wrapper sampled before it started its worker looked like a worker of its own (a Dask
    # worker's own children, such as multiprocessing's resource tracker, are no workers).
    workers = {pid: cpu for pid, cpu in workers.items() if pid not in parents}
    seconds = time.perf_counter() - start
    error = process.stderr.read().decode("utf-8", "replace")
    if process.returncode != 0:
        sys.stderr.write(error[-4000:])
        raise subprocess.CalledProcessError(process.returncode, command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sampled(seconds, coordinator, tuple(sorted(workers.values())), total)


RUNNER_FLAGS = {"local": [], "dask": ["--runner", "DaskRunner"]}


def fastest(tree: str, work: str, workers: int | None, repeats: int, runner: str) -> Sampled:
    runs = []
    for _ in range(repeats):
        out = os.path.join(work, "out")
        flags = RUNNER_FLAGS[runner] + (["--direct_num_workers", str(workers)] if workers else [])
        runs.append(run_sampled(ours(tree, out, flags, resize=False), runner=runner))
        shutil.rmtree(out, ignore_errors=True)
    return min(runs, key=lambda run: run.seconds)


def efficiency(serial_fraction: float, workers: int) -> float:
    """Amdahl: the share of N workers' capacity a build can use with serial fraction f."""
    return 1.0 / (workers * serial_fraction + 1.0 - serial_fraction)


def describe(name: str, images: int, run: Sampled) -> str:
    busy = [cpu / run.seconds for cpu in run.worker_cpu]
    imbalance = max(run.worker_cpu) / statistics.mean(run.worker_cpu) if run.worker_cpu else 0
    sampled = run.coordinator_cpu + sum(run.worker_cpu)
    return (
        f"| {name} | {images} | {run.seconds:.2f} | {run.coordinator_cpu:.2f} | "
        f"{' / '.join(f'{cpu:.2f}' for cpu in run.worker_cpu)} | "
        f"{' / '.join(f'{b:.0%}' for b in busy)} | {imbalance:.2f} | "
        f"{sampled / run.total_cpu:.0%} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_pair(parser)
    parser.add_argument("--workers", type=int, default=None, help="--direct_num_workers N.")
    parser.add_argument("--repeats", type=int, default=2, help="Runs per tree; fastest counts.")
    parser.add_argument(
        "--runner",
        choices=sorted(RUNNER_FLAGS),
        default="local",
        help="local: the plain CLI; dask: --runner DaskRunner (its own LocalCluster, one "
        "worker process per core), where the launcher runs the Dask scheduler and the data "
        "moves between the workers.",
    )
    args = parser.parse_args()
    n_small, n_large = tree_sizes(parser, args)
    if args.workers and args.runner != "local":
        parser.error("--workers sizes the local runner; Dask's LocalCluster has one per core")
    work = tempfile.mkdtemp(prefix="scaling-")
    try:
        tiny_tree = os.path.join(work, "tiny")
        sample_tree.write_tree(tiny_tree, num_train=20, num_val=4, seed=0)
        tiny, small, large = (
            fastest(tree, work, args.workers, args.repeats, args.runner)
            for tree in (tiny_tree, args.small_tree, args.large_tree)
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        "| tree | images | wall s | coordinator CPU s | worker CPU s | worker busy | "
        "imbalance | CPU sampled |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(describe("tiny", 20, tiny))
    print(describe("small", n_small, small))
    print(describe("large", n_large, large))
    added = n_large - n_small
    coordinator = (large.coordinator_cpu - small.coordinator_cpu) / added
    workers = (sum(large.worker_cpu) - sum(small.worker_cpu)) / added
    print()
    if large.seconds <= small.seconds or coordinator < 0 or workers <= 0:
        # Trees too close in size for the difference to rise above the noise.
        print("marginal figures: - (the larger tree did not cost more; use larger trees)")
        return 0
    fraction = coordinator / (coordinator + workers)
    rate = added / (large.seconds - small.seconds)
    print(f"marginal rate: {rate:.0f} images/s on {len(large.worker_cpu)} workers")
    print(f"coordinator CPU per image: {coordinator * 1e3:.3f} ms")
    print(f"workers' CPU per image: {workers * 1e3:.3f} ms")
    print(f"serial fraction f: {fraction:.2%}")
    for n in (2, 16, 64):
        print(f"efficiency at {n} workers (Amdahl bound): {efficiency(fraction, n):.2f}")
    print(f"start-up: tiny tree {tiny.seconds:.2f} s; small tree minus its images at the")
    print(f"  marginal rate {small.seconds - n_small / rate:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
