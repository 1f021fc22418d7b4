"""Break the cluster on purpose: builds whose workers are killed while they run.

    python -m benchmarks.chaos --runs 10 --seed 0                 # Dask, then local
    python -m benchmarks.chaos --mode dask --runs 20 --images 600

Dask: a real cluster on loopback, started as a user starts one (`dask scheduler`, two `dask
worker` processes, each under its nanny, one thread, 2 GiB), and the plain CLI with
`--runner DaskRunner --dask_client_address`. Each run, at a seeded random moment of the build,
does one of: SIGKILL a worker process (its nanny starts a new one), make a worker outgrow its
memory limit so that its nanny restarts it, or (once in the campaign) SIGKILL the scheduler.
Local: the plain CLI with two worker processes (`--direct_running_mode multi_processing`), one
of them SIGKILLed at a random moment.

Each build must either exit 0 with the reference build's bytes (the same tree built in this
process without chaos) or exit non-zero with nothing committed (no `build_info.json`); then
`--resume`, on a healthy cluster, must give the reference's bytes. A build that hangs (past
`--timeout`) fails the campaign too. Prints one line per run and a tally; exits 1 on any
failure.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil

from beam_pipeline.tools import sample_tree
from schemas import BUILD_INFO_FILE

BIN = pathlib.Path(sys.executable).parent
HOG_GIB = 2.5  # what a worker allocates to outgrow its 2 GiB limit


def files(out: pathlib.Path) -> dict[str, bytes]:
    """Every file a build left, by relative path (its scratch directories aside)."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not {".tmp", ".progress", ".staged"} & set(p.relative_to(out).parts)
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """A Dask scheduler and two nanny-managed workers, each its own process group."""

    def __init__(self, scratch: pathlib.Path):
        self.scratch = scratch
        self.address = ""
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        port = _free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        log = open(self.scratch / "cluster.log", "ab")  # noqa: SIM115 - the processes' stderr
        dask = str(BIN / "dask")
        common = {"stdout": log, "stderr": log, "start_new_session": True}
        self.processes = [
            subprocess.Popen(
                [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                **common,
            )
        ]
        for _ in range(2):
            self.processes.append(
                subprocess.Popen(
                    [
                        dask,
                        "worker",
                        self.address,
                        "--host",
                        "127.0.0.1",
                        "--nthreads",
                        "1",
                        "--memory-limit",
                        "2GiB",
                        "--no-dashboard",
                    ],
                    **common,
                )
            )
        from dask.distributed import Client

        with Client(self.address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.processes = []

    def kill_scheduler(self) -> str:
        os.kill(self.processes[0].pid, signal.SIGKILL)
        return "scheduler SIGKILLed"

    def _workers(self) -> list[tuple[str, int]]:
        from dask.distributed import Client

        with Client(self.address, timeout=10) as client:
            return sorted(client.run(os.getpid).items())

    def kill_worker(self, rng: random.Random) -> str:
        address, pid = rng.choice(self._workers())
        os.kill(pid, signal.SIGKILL)
        return f"worker {address} (pid {pid}) SIGKILLed"

    def outgrow_memory(self, rng: random.Random) -> str:
        """One worker allocates past its memory limit beside the task it runs (a thread that
        `client.run` starts in it, outside the task system): its nanny restarts it."""
        from dask.distributed import Client

        address, pid = rng.choice(self._workers())
        with Client(self.address, timeout=10) as client:
            with contextlib.suppress(OSError):  # the nanny may end it before it answers
                client.run(_start_hog, workers=[address])
            deadline = time.monotonic() + 30
            while psutil.pid_exists(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        if psutil.pid_exists(pid):
            return f"worker {address} (pid {pid}) outgrew its memory, not restarted in 30 s"
        return f"worker {address} (pid {pid}) restarted by its nanny for memory"


def _start_hog() -> None:
    """Runs in a worker: a thread that allocates past the worker's memory limit."""
    import threading

    def hog() -> None:
        block = bytearray(int(HOG_GIB * 2**30))
        for offset in range(0, len(block), 4096):  # touch every page: resident memory
            block[offset] = 1
        time.sleep(60)

    threading.Thread(target=hog, daemon=True).start()


def run_build(argv: list[str], timeout: float, action=None, delay: float = 0.0):
    """(exit code or None when it hung, what was done) for one CLI build; `action()` runs
    `delay` seconds after the start, while the build is still running."""
    # stderr to a file: a pipe nobody reads while waiting would fill and stall the build.
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "beam_pipeline", *argv],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
        done = "nothing (the build ended first)"
        try:
            if action is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(delay)
                if process.poll() is None:
                    done = action(process)
            try:
                process.wait(timeout)
                code = process.returncode
            except subprocess.TimeoutExpired:
                code = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
    return code, done, stderr


def kill_local_worker(rng: random.Random):
    def action(process: subprocess.Popen) -> str:
        workers: list[psutil.Process] = []
        while not workers and process.poll() is None:  # they start a second or so in
            with contextlib.suppress(psutil.Error):
                workers = [  # the SDK workers, not a fork yet to exec their `sh -c`
                    child
                    for child in psutil.Process(process.pid).children(recursive=True)
                    if child.name().startswith("python")
                    and "apache_beam.runners.worker.sdk_worker_main" in child.cmdline()
                ]
            time.sleep(0.01)
        if not workers:
            return "nothing (the build ended first)"
        victim = rng.choice(workers)
        victim.send_signal(signal.SIGKILL)
        return f"worker process {victim.pid} SIGKILLed"

    return action


def campaign(args, scratch: pathlib.Path) -> collections.Counter:
    """Runs the reference build, then each mode's calm build and chaos runs; returns the tally."""
    rng = random.Random(args.seed)
    tree = scratch / "tree"
    sample_tree.write_tree(str(tree), num_train=args.images, num_val=args.images // 5, seed=3)
    flags = ["--input_dir", str(tree), "--num_shards", "train=8,validation=2"]
    flags += ["--max_bad_fraction", "0"]
    code, _, stderr = run_build([*flags, "--output_dir", str(scratch / "reference")], args.timeout)
    if code != 0:
        raise SystemExit(f"the reference build failed: {stderr[-2000:]}")
    reference = files(scratch / "reference")
    tally: collections.Counter = collections.Counter()
    for mode in ["dask", "local"] if args.mode == "both" else [args.mode]:
        with Chaos(mode, scratch, flags, reference, args.timeout) as chaos:
            started = time.monotonic()
            verdict = chaos.judge(scratch / f"{mode}-calm", chaos.build(scratch / f"{mode}-calm"))
            length = time.monotonic() - started
            print(f"{mode} without chaos: {verdict} in {length:.1f} s", flush=True)
            tally[f"{mode}: {verdict}"] += 1
            scheduler_run = rng.randrange(args.runs) if mode == "dask" else -1
            for number in range(args.runs):
                out = scratch / f"{mode}-{number}"
                action = chaos.pick(rng, kill_scheduler=number == scheduler_run)
                delay = rng.uniform(0.2, 0.9) * length
                code, done, stderr = chaos.build(out, action, delay)
                verdict = chaos.judge(out, (code, done, stderr))
                line = f"{mode} run {number}: at {delay:.1f} s, {done}: {verdict}"
                if verdict.startswith("FAILURE"):
                    line += f"\n    build's stderr: {stderr[-1500:]}"
                print(line, flush=True)
                tally[f"{mode}: {verdict.split(' (exit')[0]}"] += 1
    return tally


class Chaos:
    """One mode's builds: on a Dask cluster it starts (and restarts after a scheduler's
    death), or locally on two worker processes."""

    def __init__(self, mode, scratch, flags, reference, timeout):
        self.cluster = Cluster(scratch) if mode == "dask" else None
        self.flags, self.reference, self.timeout = flags, reference, timeout

    def __enter__(self):
        if self.cluster:
            self.cluster.start()
        return self

    def __exit__(self, *exc):
        if self.cluster:
            self.cluster.stop()

    def runner(self) -> list[str]:
        if self.cluster:
            return ["--runner", "DaskRunner", "--dask_client_address", self.cluster.address]
        return ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]

    def build(self, out, action=None, delay=0.0, resume=False):
        argv = [*self.flags, "--output_dir", str(out), *self.runner()]
        return run_build([*argv, "--resume"] if resume else argv, self.timeout, action, delay)

    def pick(self, rng: random.Random, kill_scheduler: bool):
        """What this run does to the build: a function of the build's process."""
        cluster = self.cluster
        if cluster is None:
            return kill_local_worker(rng)
        if kill_scheduler:
            return lambda _: cluster.kill_scheduler()
        if rng.random() < 2 / 3:
            return lambda _: cluster.kill_worker(rng)
        return lambda _: cluster.outgrow_memory(rng)

    def heal(self) -> None:
        """A new cluster where the scheduler died (its workers went with it)."""
        if self.cluster and self.cluster.processes[0].poll() is not None:
            self.cluster.stop()
            self.cluster.start()

    def judge(self, out: pathlib.Path, result) -> str:
        """'identical', 'failed loudly (exit N), resumed identical', or what went wrong."""
        code = result[0]
        self.heal()
        if code is None:
            return "FAILURE: the build hung"
        if code == 0:
            return "identical" if files(out) == self.reference else "FAILURE: other bytes"
        if (out / BUILD_INFO_FILE).exists():
            return f"FAILURE: exit {code} with build_info.json committed"
        resumed = self.build(out, resume=True)[0]
        self.heal()
        if resumed != 0:
            return f"FAILURE: --resume exited {resumed}"
        if files(out) != self.reference:
            return "FAILURE: --resume gave other bytes"
        return f"failed loudly (exit {code}), resumed identical"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("dask", "local", "both"), default="both")
    parser.add_argument("--runs", type=int, default=10, help="chaos runs per mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=300, help="train images of the tree")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a hang")
    parser.add_argument("--scratch", help="where trees and builds go (default: a temp dir)")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        scratch = args.scratch or stack.enter_context(tempfile.TemporaryDirectory())
        started = time.monotonic()
        tally = campaign(args, pathlib.Path(scratch))
    print(f"\n{sum(tally.values())} builds in {time.monotonic() - started:.0f} s:")
    for verdict, count in sorted(tally.items()):
        print(f"  {count:3d}  {verdict}")
    return 1 if any("FAILURE" in verdict for verdict in tally) else 0


if __name__ == "__main__":
    raise SystemExit(main())
