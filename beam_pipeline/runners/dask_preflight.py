"""What a Dask build checks before it writes anything: the Dask options' numbers, and that a
scheduler answers at --dask_client_address (and is Dask's)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib
import os
import platform
import shlex
import socket
from typing import Any

from apache_beam.runners.dask import dask_runner as beam_dask

# A build fails when its cluster has had no worker this long (all died, or were stopped: the
# scheduler would otherwise wait for new ones forever), and waits this long for a first one.
NO_WORKERS_SECONDS = 60.0


def _check_dask_numbers(dask_options: dict) -> None:
    """ValueError, naming the flag, for a Dask option that must be a whole number above 0:
    Beam's options took -3 partitions (a build that wrote nothing, and failed only reading
    its own metadata) and any word as the connection timeout."""
    for flag, key in (
        ("--dask_npartitions", "npartitions"),
        ("--dask_partition_size", "partition_size"),
        ("--dask_connection_limit", "connection_limit"),
    ):
        value = dask_options.get(key)
        if value is not None and value <= 0:
            raise ValueError(f"{flag} {value}: give a whole number above 0")
    if "timeout" in dask_options:
        timeout = dask_options["timeout"]
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(
                "--dask_connection_timeout: give whole seconds above 0 (e.g. 30); Beam reads "
                "no other form"
            )


def check_scheduler(options) -> None:
    """ValueError when no Dask scheduler answers at --dask_client_address, found before the
    build writes anything. Dask's client would retry for its whole connect timeout (30 s by
    default) after the output directory was made, and a web server listening there made it
    fail with a MemoryError (its reply read as a frame length). A TCP address is asked who it is,
    as Dask's own tools do; a TLS one is only connected to (its credentials are the client's);
    a scheduler file may appear later (Dask waits for it)."""
    dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(
        drop_default=True, current_only=True
    )
    _check_dask_numbers(dask_options)
    scheduler_file = dask_options.get("scheduler_file")
    if scheduler_file is not None and not os.path.isfile(scheduler_file):
        raise ValueError(
            f"--dask_scheduler_file {scheduler_file} does not exist (Dask would wait for it "
            "without end): start the scheduler first, `dask scheduler --scheduler-file "
            f"{shlex.quote(scheduler_file)}`, or give its address with --dask_client_address"
        )
    address = dask_options.get("address")
    if address is not None and not address.strip():
        raise ValueError(
            "--dask_client_address is empty (an unset shell variable?): give the scheduler's "
            "tcp://HOST:PORT, or leave the flag out to start a cluster on this machine"
        )
    if address:
        _check_address(address, dask_options.get("timeout"))


def _check_address(address: str, given_timeout) -> None:
    """ValueError when `address` is no scheduler address, or none answers there as Dask's."""
    import dask
    from dask.utils import parse_timedelta
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as error:
        raise ValueError(
            f"--dask_client_address {address}: not a scheduler address ({error}); give "
            "tcp://HOST:PORT, as `dask scheduler` prints it"
        ) from None
    if scheme not in backends:
        raise ValueError(
            f"--dask_client_address {address}: unknown address scheme {scheme!r} (Dask's: "
            f"{', '.join(sorted(backends))}); give tcp://HOST:PORT, as `dask scheduler` prints it"
        )
    if scheme not in ("tcp", "tls"):
        return
    # Beam's parse of --dask_connection_timeout: an int, or a marker for "5s".
    default = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
    ok = isinstance(given_timeout, (int, float)) and given_timeout > 0
    timeout = float(given_timeout if ok else default)
    unreachable = f"cannot reach the Dask scheduler at {address} (--dask_client_address)"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise ValueError(
            f"{unreachable}: {error.strerror or error}; start it (`dask scheduler`) or correct "
            "the address"
        ) from None
    if scheme == "tcp":
        _check_identity(location, timeout, unreachable)


def _check_identity(location: str, timeout: float, unreachable: str) -> None:
    """ValueError unless the server at tcp://`location` says it is a Dask scheduler. One that
    took the connection answers at once; a server of another kind (a web server, a dashboard)
    would keep the question unanswered for the whole connect timeout."""
    asked = min(timeout, IDENTITY_SECONDS)
    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # its own event loop
        try:
            identity = thread.submit(asyncio.run, _identity(f"tcp://{location}", asked)).result()
        except Exception:  # noqa: BLE001 - whatever answered, it spoke no Dask
            identity = None
    kind = identity.get("type") if isinstance(identity, dict) else None
    if kind == "Scheduler":
        return
    what = (
        f"a Dask {kind.lower()} answers there, not the scheduler"
        if isinstance(kind, str)
        else "something accepts connections there but does not answer as a Dask server"
    )
    raise ValueError(
        f"{unreachable}: {what}; give the scheduler's address (`dask scheduler` prints it)"
    )


IDENTITY_SECONDS = 5.0  # how long a server that took the connection has to say it is Dask's


async def _identity(address: str, timeout: float) -> Any:
    """What a Dask server at `address` says it is (its `identity` handler), within `timeout`."""
    from distributed.core import rpc

    async with rpc(address, timeout=timeout) as server:
        return await asyncio.wait_for(server.identity(), timeout)


def no_workers_message(address: str, verb: str) -> str:
    """Why a build on a cluster without workers stops, and what to do."""
    return (
        f"the Dask cluster at {address} {verb} no worker for {NO_WORKERS_SECONDS:.0f} s: start "
        f"some (`dask worker {address} --nthreads 1`); a worker dies when it cannot import this "
        "package (install it where the workers and the scheduler run), and an adaptive "
        "cluster needs a minimum of one"
    )


# What decides a shard's bytes besides the flags and the tree, for `code_stamp`: the libraries
# that decode, check and encode the images, and Beam.
_LIBRARIES = ("PIL", "numpy", "simplejpeg", "apache_beam")


def code_stamp() -> dict[str, str]:
    """This process's code as a build's bytes depend on it: a digest of the project's modules
    (`beam_pipeline`, `schemas`), the versions of the image libraries and Beam, and Python's."""
    digest = hashlib.sha256()
    for package in ("beam_pipeline", "schemas"):
        root = os.path.dirname(importlib.import_module(package).__file__ or "")
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as source:
                    digest.update(source.read())
    stamp = {"imagenet-tfrecords modules": digest.hexdigest()[:16]}
    for name in _LIBRARIES:
        module = importlib.import_module(name)
        stamp[name] = str(getattr(module, "__version__", "?"))
    stamp["Python"] = ".".join(platform.python_version_tuple()[:2])
    return stamp


def other_code(stamps: dict[str, Any], here: dict[str, str]) -> str | None:
    """Why a worker's shards would differ from this machine's (`stamps`: `code_stamp` per
    worker, from `client.run`), naming it and what differs; None when every one matches. A
    worker with another copy of the project (one line changed) wrote other bytes, exit 0. A
    worker that could not answer (its error in `stamps`: one that cannot import the project)
    is left to fail on its first task, as it did."""
    for worker, stamp in sorted(stamps.items()):
        if not isinstance(stamp, dict):
            continue
        differ = [
            f"{key} {stamp.get(key)} there, {value} here"
            for key, value in here.items()
            if stamp.get(key) != value
        ]
        if differ:
            return (
                f"the Dask worker {worker} runs other code than this machine ({'; '.join(differ)}):"
                " its shards would differ from a local build's; install the same "
                "imagenet-tfrecords and libraries on every worker, or start them from this "
                "checkout (PYTHONPATH)"
            )
    return None
