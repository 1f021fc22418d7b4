"""The runner of a build: FnApiRunner when none is named, sized to this machine (one worker process
per core, or this process for a small build), the checks of --runner and the worker flags, and
how the build ran, for its summary."""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
from collections.abc import Sequence

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
)

from beam_pipeline.runners import machine
from beam_pipeline.runners.beam_flags import DASK_RUNNER
from beam_pipeline.tree import layouts

logger = logging.getLogger(__name__)


# Without --runner, Beam (>= 2.68) starts DirectRunner, which first tries Prism: a Go binary it
# downloads at run time, which ignores --direct_running_mode and --direct_num_workers. Local builds
# run on FnApiRunner instead, the engine DirectRunner used for batch pipelines until then (and
# still falls back to when offline): the same on every machine, with or without a network.
LOCAL_RUNNER = "FnApiRunner"


# Beam options (WorkerOptions) that only a cloud runner reads; locally they would be ignored.
_CLOUD_WORKER_FLAGS = {"--num_workers", "--max_num_workers"}

# A local build of fewer images than this runs in the launching process: worker processes take
# ~2.3 s longer to start than an in-process build, which 2 of them first win back at ~2,000
# images of ImageNet's size (benchmarks/RESULTS.md, "Small builds run in process", `cd86d5e`).
# So does a build of one shard's worth of bytes: each split is one shard, which one worker
# writes (1,200 images: 4.25 s in process, 5.4 s with 2 workers; same section).
SMALL_BUILD_IMAGES = 1000


def tree_size_up_to(plan: layouts.DiscoveryPlan, images: int, num_bytes: int) -> tuple[int, int]:
    """(files, their bytes) below the plan's image directories, counted until there are at
    least `images` files of more than `num_bytes` bytes in all.

    `(images, num_bytes + 1)` for a tree that is not on a local disk (listing it twice would
    cost a cloud build time; a local runner on such a tree is rare).
    """
    count = size = 0
    for task in plan.tasks:
        if task.kind == layouts.ANNOTATIONS:
            continue
        if "://" in task.directory:
            return images, num_bytes + 1
        for root, _, names in os.walk(task.directory):
            for name in names:
                count += 1
                with contextlib.suppress(OSError):  # (gone since: the build will say so)
                    size += os.stat(os.path.join(root, name)).st_size
                if count >= images and size > num_bytes:
                    return count, size
    return count, size


def pipeline_options(
    argv: Sequence[str] = (),
    *,
    every_core: bool = False,
    images: int | None = None,
    one_shard: bool = False,
) -> PipelineOptions:
    """Beam's options from the command line; FnApiRunner when no --runner is given.

    With `every_core` (the command line's default), a local build whose command line names
    neither a runner nor a running mode runs one worker process per available core
    (`--direct_running_mode multi_processing --direct_num_workers N`); `--direct_num_workers`
    alone keeps its number. On one core, for fewer than SMALL_BUILD_IMAGES `images`, or for
    `one_shard` (each split one shard, written by one worker), it stays in this process. A
    local build refuses Dataflow's worker counts (`--num_workers`), which it would ignore.
    """
    argv = list(argv)
    options = PipelineOptions(argv)
    standard = options.view_as(StandardOptions)
    named = {token.split("=", 1)[0] for token in argv}
    if standard.runner is None:
        cloud_only = sorted(named & _CLOUD_WORKER_FLAGS)
        if cloud_only:
            raise ValueError(
                f"{', '.join(cloud_only)} sizes a cloud runner's workers and does nothing in a "
                "local build: pass --direct_num_workers N for N local worker processes, or "
                "--runner DataflowRunner"
            )
        standard.runner = LOCAL_RUNNER
        direct = options.view_as(DirectOptions)
        if every_core and "--direct_running_mode" not in named:
            if "--direct_num_workers" not in named:
                cores = machine.available_cores()
                few = images is not None and images < SMALL_BUILD_IMAGES
                direct.direct_num_workers = 1 if few or one_shard else cores
                if (few or one_shard) and cores > 1:
                    logger.info(
                        "%s: building in this process (worker processes would take longer to "
                        "start than they save; --direct_num_workers N asks for N)",
                        f"{images:,} images" if few else "one shard's worth of images a split",
                    )
            if direct.direct_num_workers > 1:
                direct.direct_running_mode = "multi_processing"
    return options


# Runners by the names a user types, for the did-you-mean of a mistyped --runner.
_RUNNER_NAMES = (
    "DaskRunner",
    "DataflowRunner",
    "DirectRunner",
    "FlinkRunner",
    "FnApiRunner",
    "PortableRunner",
    "PrismRunner",
    "SparkRunner",
)


_LOCAL_WORKER_FLAGS = {"--direct_num_workers", "--direct_running_mode"}


def check_runner(options: PipelineOptions, argv: Sequence[str]) -> None:
    """ValueError for a runner Beam does not know (naming the closest), for flags the runner
    would ignore (`--streaming`: the build is a batch pipeline; local or cloud worker counts on
    Dask), and for a Dask scheduler address where nothing answers."""
    named = {token.split("=", 1)[0] for token in argv}
    if "--streaming" in named:
        raise ValueError("--streaming: a build is a batch pipeline over a finite tree; drop it")
    if "--direct_num_workers" in named:
        workers = options.view_as(DirectOptions).direct_num_workers
        most = max(64, 4 * machine.available_cores())
        if not 1 <= workers <= most:
            raise ValueError(
                f"--direct_num_workers {workers}: give 1 to {most} worker processes (this "
                f"machine has {machine.available_cores()} cores; each process is a Python "
                "interpreter of its own, started one after another)"
            )
    direct = options.view_as(DirectOptions)
    mode = direct.direct_running_mode if "--direct_running_mode" in named else None
    if mode == "in_memory" and direct.direct_num_workers not in (None, 1):
        raise ValueError(
            f"--direct_running_mode in_memory runs one worker, in this process: "
            f"--direct_num_workers {direct.direct_num_workers} asks for more; pass "
            "--direct_running_mode multi_processing (or leave the mode out)"
        )
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return
    if runner == DASK_RUNNER:
        ignored = sorted(named & (_CLOUD_WORKER_FLAGS | _LOCAL_WORKER_FLAGS))
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} does nothing on Dask, whose cluster runs the build: give "
                "it workers (`dask worker SCHEDULER --nworkers N --nthreads 1` on each "
                "machine); without --dask_client_address the build starts one per core here"
            )
        from beam_pipeline.runners.dask_preflight import check_scheduler

        check_scheduler(options)
        return
    if runner.lower() in ("portablerunner", "portable") and "--job_endpoint" not in named:
        raise ValueError(  # (Beam said so once the build had begun: exit 1, an output made)
            f"--runner {runner} needs --job_endpoint HOST:PORT, the address of a running Beam "
            "job service (Flink's or Spark's job server): it starts none"
        )
    if "." in runner:  # a runner's class path: Beam imports it
        return
    from apache_beam.runners.runner import _RUNNER_MAP

    if runner.lower() in _RUNNER_MAP or runner.lower() + "runner" in _RUNNER_MAP:
        return
    close = difflib.get_close_matches(runner, _RUNNER_NAMES, n=1, cutoff=0.6)
    raise ValueError(
        f"unknown --runner {runner}{f' (did you mean {close[0]}?)' if close else ''}: "
        f"{', '.join(_RUNNER_NAMES)}, or a runner's class path"
    )


def describe_workers(options: PipelineOptions) -> str:
    """How the build ran, for its summary: `2 worker processes (FnApiRunner)`, or the runner."""
    runner = options.view_as(StandardOptions).runner
    if runner == DASK_RUNNER:
        from beam_pipeline.runners import dask_runner

        address = options.get_all_options().get("address")
        where = f"on the Dask cluster at {address}" if address else "on a local Dask cluster"
        if dask_runner.last_cluster is None or dask_runner.last_cluster[0] != address:
            return where
        _, workers, threads = dask_runner.last_cluster
        plural = "s" if workers != 1 else ""
        return f"{where} ({workers} worker{plural}, {threads} thread{'s' if threads != 1 else ''})"
    if runner != LOCAL_RUNNER:
        return f"on {runner}"
    direct = options.view_as(DirectOptions)
    mode, workers = direct.direct_running_mode, direct.direct_num_workers
    if mode == "multi_processing":
        return f"on {workers} worker process{'es' if workers != 1 else ''}"
    if mode == "multi_threading":
        return f"on {workers} worker thread{'s' if workers != 1 else ''}"
    return "in this process (in_memory)"
