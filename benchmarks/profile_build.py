"""Where a build's CPU time goes, per image: `perf` samples by library, 2k vs 8k images.

    python -m benchmarks.profile_build bench_data/tree2k bench_data/tree8k \\
        [--contender "ours, multi_processing x2"] [--resize]

Runs the contender (any name `benchmarks.build_benchmark` knows) under `perf record` on both trees
and prints, per library (DSO) group, the CPU milliseconds per image between the two sizes, so
fixed start-up does not count: (CPU at 8k - CPU at 2k) / (8k - 2k images). Each tree is built
twice: without the profiler for the CPU seconds of the whole process tree (the kernel's exact
accounting of the children), and under `perf record` to split them. Needs Linux `perf` with
permission to sample (root, or kernel.perf_event_paranoid <= 1). A Python frame is not named
(CPython 3.11 has no perf trampoline): everything the interpreter runs, Beam's runner and our
DoFns alike, is "Python".
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

from benchmarks.build_benchmark import (
    BASELINES,
    MODES,
    OURS,
    add_tree_pair,
    command,
    tree_sizes,
)

# First match wins; a DSO matching none is "other". simplejpeg links its own libjpeg-turbo.
GROUPS = [
    ("JPEG decode (libjpeg-turbo)", r"libjpeg|simplejpeg|_jpeg\.cpython"),
    ("Python interpreter (Beam, our DoFns)", r"libpython"),
    ("kernel (file I/O, page faults, scheduling)", r"\[kernel"),
    ("libc (memcpy, malloc)", r"^libc[.-]|ld-linux"),
    ("SHA-256 (OpenSSL)", r"libcrypto"),
    ("protobuf (tf.train.Example)", r"_message|libprotobuf"),
    ("lxml (XML)", r"etree|_elementpath|libxml"),
    ("Beam's compiled runtime (coders, operations)", r"coder_impl|operations|stream|statesampler"),
    ("gRPC (runner <-> workers)", r"grpc"),
    ("CRC32C (google-crc32c)", r"crc32c"),
    ("Pillow (other than decode)", r"_imaging"),
    ("pickle", r"_pickle"),
    ("OpenBLAS (numpy's threads)", r"openblas"),
    ("JPEG encode / resize", r"libturbojpeg|libimagequant"),
]


PERF_MISSING = (
    "needs Linux perf on the PATH: install the package `linux-perf` (Debian: apt-get install "
    "linux-perf) or `linux-tools-common linux-tools-$(uname -r)` (Ubuntu)"
)
PARANOID = "/proc/sys/kernel/perf_event_paranoid"


def perf_problem() -> str | None:
    """Why `perf record` cannot sample here, or None: checked before any build starts."""
    if shutil.which("perf") is None:
        return PERF_MISSING
    if os.geteuid() != 0 and os.path.exists(PARANOID):
        with open(PARANOID) as f:
            level = int(f.read())
        if level > 1:
            return f"perf may not sample other processes: run as root or set {PARANOID} <= 1"
    return None


def group_of(dso: str) -> str:
    for name, pattern in GROUPS:
        if re.search(pattern, dso):
            return name
    return "other"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_quietly(argv: list[str]) -> None:
    """Runs the command; on failure shows the end of its error output and raises."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if done.returncode != 0:
        sys.stderr.buffer.write(done.stderr[-4000:])
        raise subprocess.CalledProcessError(done.returncode, argv)


def cpu_seconds(argv: list[str]) -> float:
    """CPU seconds (user + system) of the command and all its descendants, unprofiled."""
    before = children_cpu()
    run_quietly(argv)
    return children_cpu() - before


def profile(argv: list[str], frequency: int, work: str) -> dict[str, float]:
    """{group: share of the CPU samples} of the command under perf."""
    data = os.path.join(work, "perf.data")
    run_quietly(["perf", "record", "-q", "-F", str(frequency), "-o", data, "--", *argv])
    report = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "-n", "--sort", "dso", "-g", "none"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    samples: dict[str, int] = {}
    for line in report.splitlines():
        match = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S.*)$", line)
        if match and not line.startswith("#"):
            group = group_of(match.group(2).strip())
            samples[group] = samples.get(group, 0) + int(match.group(1))
    total = sum(samples.values()) or 1
    return {group: n / total for group, n in samples.items()}


def profile_trees(contender: str, trees: list[str], resize: bool, frequency: int) -> list:
    """[(CPU seconds, {group: share of the samples})] of the contender's build of each tree."""
    work = tempfile.mkdtemp(prefix="profile-")
    measured = []
    try:
        for tree in trees:
            out = os.path.join(work, "out")
            argv = command(contender, tree, out, resize)
            cpu = cpu_seconds(argv)
            shutil.rmtree(out, ignore_errors=True)
            measured.append((cpu, profile(argv, frequency, work)))
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return measured


def print_profile(contender: str, sizes: list[int], measured: list) -> None:
    """The marginal CPU per image by group, between the two trees."""
    (cpu_s, share_s), (cpu_l, share_l) = measured
    extra = sizes[1] - sizes[0]
    rows = {
        group: 1000 * (cpu_l * share_l.get(group, 0) - cpu_s * share_s.get(group, 0)) / extra
        for group in {*share_s, *share_l}
    }
    total = 1000 * (cpu_l - cpu_s) / extra
    print(f"{contender}: CPU {cpu_s:.1f} s at {sizes[0]} images, {cpu_l:.1f} s at {sizes[1]}")
    print("| where (by library) | CPU ms per image (marginal) | share |")
    print("|---|---|---|")
    # No shares (nor a rate) when start-up noise outweighed the extra images' CPU.
    share = (lambda ms: f"{ms / total:.0%}") if total > 0 else (lambda ms: "-")
    for group, ms in sorted(rows.items(), key=lambda item: -item[1]):
        if abs(ms) >= 0.005:
            print(f"| {group} | {ms:.3f} | {share(ms)} |")
    print(f"| total | {total:.3f} | {share(total)} |")
    if total <= 0:
        print("The larger tree took no more CPU: the trees are too close in size to tell.")
        return
    cores = os.cpu_count() or 1
    print(f"All {cores} cores busy on this work would build {1000 * cores / total:.0f} images/s.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_pair(parser)
    parser.add_argument("--contender", default=OURS, choices=[*MODES, *BASELINES])
    parser.add_argument("--resize", action="store_true", help="Shorter side to 256.")
    parser.add_argument("--frequency", type=int, default=999, help="perf samples per second")
    args = parser.parse_args()
    problem = perf_problem()
    if problem:
        parser.error(problem)
    trees = [args.small_tree, args.large_tree]
    sizes = list(tree_sizes(parser, args))
    print_profile(
        args.contender, sizes, profile_trees(args.contender, trees, args.resize, args.frequency)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
