"""What this machine lets a build use (no Beam import)."""

from __future__ import annotations

import math
import os

CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup (v2) CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        with open(CGROUP_CPU_MAX, encoding="ascii") as stream:
            quota, period = stream.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)
