"""A tf.data service for trainer hosts short of CPU: workers elsewhere read and decode.

    python -m loaders.service dispatcher --port 5050
    python -m loaders.service worker --dispatcher HOST:5050      # on each CPU host, any number

then in training code `load_dataset(DATA_DIR, "train", ..., service="grpc://HOST:5050")`. The
workers need this package, TensorFlow and the shards at the same path (`gs://` or a shared file
system). Each epoch is one tf.data service job in "distributed_epoch" mode: the dispatcher
hands the shard list out to the workers, so every record is read once per epoch.
"""

from __future__ import annotations

import argparse
import re
import socket
import sys

_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[^\]]+\]|[^:/\s]+):(?P<port>\d{1,5})$")


# The dispatcher's own RPC that answers who it is (tensorflow/core/data/service/dispatcher.proto).
_GET_VERSION = "/tensorflow.data.DispatcherService/GetVersion"


def checked_service(address: str, timeout: float = 5.0) -> str:
    """`address` as "grpc://host:port", once a tf.data service dispatcher answers there.

    tf.data retries an address forever, whatever answers it (nothing, a web server, one of the
    service's workers), so the dispatcher is asked for its version first, over gRPC.

    Raises:
      ValueError: not "[grpc://]host:port".
      ConnectionError: no dispatcher answers there (naming what does, when something does).
    """
    import grpc  # TensorFlow's own dependency

    found = _ADDRESS.match(str(address))
    if not found:
        raise ValueError(f"service must be 'grpc://host:port', not {address!r}")
    host, port = found.group("host"), int(found.group("port"))
    start = "start one with `python -m loaders.service dispatcher --port PORT`"
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        ask = channel.unary_unary(_GET_VERSION)
        try:
            ask(b"", timeout=timeout)
        except grpc.RpcError as error:
            code, details = error.code(), error.details()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                why = "a gRPC server answers, but it is not a dispatcher (a worker's port?)"
            elif code == grpc.StatusCode.UNAVAILABLE and "HTTP/2" in (details or ""):
                why = f"something that does not speak gRPC answers ({details})"
            elif code == grpc.StatusCode.UNAVAILABLE:
                why = f"nothing answers ({details})"
            else:
                why = f"{code.name}: {details}"
            raise ConnectionError(
                f"no tf.data service dispatcher at {host}:{port}: {why}; {start}"
            ) from None
    return f"grpc://{host}:{port}"


def port_is_free(port: int) -> bool:
    """Whether nothing listens on `port`. gRPC binds with SO_REUSEPORT, so a second server on
    a port in use starts "successfully" and the kernel splits the connections between them."""
    if port == 0:
        return True
    family, address = (
        (socket.AF_INET6, ("::", port)) if socket.has_ipv6 else (socket.AF_INET, ("", port))
    )
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError:
            return False
    return True


def start_dispatcher(port: int = 0, work_dir: str | None = None):
    """A running dispatcher (`.target` is its "grpc://host:port")."""
    import tensorflow as tf

    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir)
    )
    return tf.data.experimental.service.DispatchServer(config)


_LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|\[::1\]|::1)$")


def worker_address(dispatcher: str, given: str | None = None) -> str:
    """The address a worker registers with the dispatcher, which hands it to the trainers
    (`%port%` stands for the worker's port): `given`, else `localhost:%port%` when the
    dispatcher is on this host's loopback, else this host's name. (TensorFlow's default is
    always `localhost:%port%`, which a trainer on another host reaches as itself.)"""
    if given:
        if _ADDRESS.match(given) or (given.startswith("[") and "]:" in given):
            return given  # HOST:PORT, [IPv6]:PORT
        if ":" in given and not given.startswith("["):
            given = f"[{given}]"  # a bare IPv6 address
        return f"{given}:%port%"
    found = _ADDRESS.match(dispatcher)
    if found and _LOOPBACK.match(found.group("host")):
        return "localhost:%port%"
    return f"{host_name()}:%port%"


def host_name() -> str:
    """This host's name for other hosts: its fully qualified name, or, where /etc/hosts
    gives `localhost` first for it (many containers), its plain host name."""
    for name in (socket.getfqdn(), socket.gethostname()):
        if name and not _LOOPBACK.match(name) and not name.startswith("localhost."):
            return name
    return socket.gethostname()


def start_worker(dispatcher: str, port: int = 0, address: str | None = None):
    """A running worker registered with `dispatcher` ("host:port" or "grpc://host:port"),
    reachable by trainers at `worker_address(dispatcher, address)`."""
    import tensorflow as tf

    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher.split("://", 1)[-1],
        worker_address=worker_address(dispatcher, address),
        port=port,
    )
    return tf.data.experimental.service.WorkerServer(config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loaders.service",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    roles = parser.add_subparsers(dest="role", required=True)
    dispatcher = roles.add_parser("dispatcher", help="run the dispatcher (one per service)")
    dispatcher.add_argument("--port", type=int, default=5050, help="its port (default: 5050)")
    dispatcher.add_argument(
        "--work_dir", help="where the dispatcher keeps its state, so a restart resumes its jobs"
    )
    worker = roles.add_parser("worker", help="run a worker (on each host that decodes)")
    worker.add_argument("--dispatcher", required=True, help="HOST:PORT of the dispatcher")
    worker.add_argument("--port", type=int, default=0, help="its own port (default: any free)")
    worker.add_argument(
        "--worker_address",
        help="HOST[:PORT] at which trainers reach this worker (default: this host's name, or "
        "localhost when the dispatcher is on this host's loopback; %%port%% is its port)",
    )
    args = parser.parse_args(argv)
    if not port_is_free(args.port):
        parser.error(f"--port {args.port} is in use (another dispatcher or worker?); pick another")
    if args.role == "dispatcher":
        server = start_dispatcher(args.port, args.work_dir)
        print(f"tf.data service dispatcher at {server.target}", flush=True)
    else:
        if not _ADDRESS.match(args.dispatcher):
            parser.error(f"--dispatcher must be HOST:PORT, not {args.dispatcher!r}")
        try:
            checked_service(args.dispatcher)
        except ConnectionError as error:
            print(f"error: --dispatcher {args.dispatcher}: {error}", file=sys.stderr)
            return 1
        address = worker_address(args.dispatcher, args.worker_address)
        server = start_worker(args.dispatcher, args.port, args.worker_address)
        taken = getattr(server, "_address", "").rpartition(":")[2]  # the port it took
        address = address.replace("%port%", str(args.port or taken or "(its port)"))
        print(
            f"tf.data service worker for {args.dispatcher}, reached by trainers at {address}",
            flush=True,
        )
    try:
        server.join()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
