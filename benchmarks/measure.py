"""Run a command and measure its wall time and the peak memory of its whole process tree.

Peak memory is the largest sum of the resident set sizes of the process and all its
descendants, sampled every 50 ms (DirectRunner's multi-process workers are children, so a
per-process `ru_maxrss` would hide them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import subprocess
import sys
import time

import psutil


@dataclasses.dataclass(frozen=True)
class Measurement:
    seconds: float
    peak_rss_bytes: int
    returncode: int
    output: str


def tree_rss(root: psutil.Process) -> int:
    """Resident memory of a process and all its descendants (0 for those already gone)."""
    total = 0
    with contextlib.suppress(psutil.Error):
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
    return total


def run_measured(
    command: list[str], env: dict[str, str] | None = None, interval: float = 0.05
) -> Measurement:
    """Runs `command` to completion; raises CalledProcessError if it fails."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, text=True
    )
    root = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss(root))
        time.sleep(interval)
    output = process.stdout.read()
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        sys.stderr.write(output[-4000:])
        raise subprocess.CalledProcessError(process.returncode, command, output)
    return Measurement(seconds, peak, process.returncode, output)


def marginal_rate(small_n: int, small: Measurement, large_n: int, large: Measurement) -> float:
    """Images per second between two sizes, so fixed start-up cost does not count.

    NaN when the larger tree did not take longer: the trees are too close in size for the
    difference to rise above the noise, and any rate would be made up.
    """
    seconds = large.seconds - small.seconds
    return (large_n - small_n) / seconds if seconds > 0 else math.nan


def built_dataset(parser, data_dir: str):
    """`loaders.dataset_info(data_dir)`; a data_dir that is no complete build is the parser's
    error (exit 2, the loader's message), not a traceback."""
    from loaders import dataset_info  # the build benchmarks import no TensorFlow

    try:
        return dataset_info(data_dir)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
