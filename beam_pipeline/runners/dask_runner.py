"""Beam's DaskRunner with a translation that computes each stage once, on every worker.

`--runner DaskRunner` runs a build on a `dask.distributed` cluster (`--dask_client_address
HOST:PORT`; without it, a LocalCluster on this machine). This runner is Apache Beam's own
`apache_beam.runners.dask.dask_runner.DaskRunner` (its options, its transform overrides, its
way of invoking DoFns on `dask.bag` partitions) with the translation from Beam transforms to
`dask.bag` operations replaced where Beam 2.77's handles this pipeline's patterns badly:

- **Side inputs** are computed once, as one task whose result every consuming task receives.
  Beam's runner recomputes the side input's whole upstream graph inside each consuming task
  (the listing ran ~25 times and every shard was written twice in one build).
- **Multi-output ParDos** (`with_outputs`): each output PCollection gets its own elements.
  Beam's runner hands every consumer all outputs mixed together.
- **Create, Reshuffle and GroupByKey spread the work over the cluster**: their output has
  PARTITIONS_PER_THREAD partitions per worker thread, so as many shard writers run as the
  cluster has threads. Beam's runner ignores Reshuffle and keeps `Create`'s partitions (one per
  128 elements), which capped a build at 3-5 concurrent shard writers whatever the cluster size.
- **CombinePerKey is lifted**: each partition is combined per key before the shuffle, as
  Beam's other runners do (Beam's Dask runner shuffles every element).
- **Every sink runs.** Beam's runner computes only the last transform it visited.
- A transform it cannot translate is refused by name (Beam's runner skips it silently).

Like Beam's, it runs batch pipelines in the global window, and it reports no Beam metrics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shlex
import socket
import time
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
from apache_beam.internal import pickler
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import (
    DoFnContext,
    DoFnInvoker,
    DoFnSignature,
    Receiver,
    _OutputHandler,
)
from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask.overrides import (
    _Create,
    _Flatten,
    _GroupAlsoByWindow,
    _GroupByKeyOnly,
    _Reshuffle,
    dask_overrides,
)
from apache_beam.runners.runner import PipelineResult, PipelineState
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.failures import BuildFailed
from beam_pipeline.runners import machine

logger = logging.getLogger(__name__)

# Partitions per worker thread after a Reshuffle or a GroupByKey: enough that the scheduler
# can even out groups of unequal cost (shards), few enough that the shuffle stays cheap.
PARTITIONS_PER_THREAD = 4

_GLOBAL = (GlobalWindow(),)


class _ListReceiver(Receiver):
    """Collects a task's outputs as (tag, value); tag None is the main output."""

    def __init__(self, tag, values: list):
        self._tag = tag
        self._values = values

    def receive(self, windowed_value: WindowedValue):
        self._values.append((self._tag, windowed_value.value))


class _TaggedReceivers(dict):
    def __init__(self, values: list):
        super().__init__()
        self._values = values

    def __missing__(self, tag):
        self[tag] = receiver = _ListReceiver(tag, self._values)
        return receiver


def _windowed(value: Any) -> WindowedValue:
    return value if isinstance(value, WindowedValue) else WindowedValue(value, 0, _GLOBAL)


def _run_bundle(items: Iterable, pickled_fn: bytes, spec: dict, *side_values) -> list:
    """Runs a DoFn over one partition (a bundle); returns its outputs as (tag, value) pairs.

    The DoFn is unpickled here, so each task has its own instance (tasks share a worker's
    threads); `side_values` are the side inputs' elements, computed once by their own tasks.
    """
    fn = pickler.loads(pickled_fn)
    values: list = []
    receivers = _TaggedReceivers(values)
    handler = _OutputHandler(
        window_fn=spec["window_fn"],
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    side_inputs = [
        SideInputMap(view_class, view_options, [_windowed(v) for v in elements])
        for (view_class, view_options), elements in zip(spec["views"], side_values, strict=True)
    ]
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn),
        handler,
        context=DoFnContext(spec["label"], state=None),
        side_inputs=side_inputs,
        input_args=spec["args"],
        input_kwargs=spec["kwargs"],
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(_windowed(item))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return values


def _precombine(items: Iterable, pickled_fn: bytes) -> list:
    """One partition's (key, value) pairs → one (key, accumulator) per key (combiner lifting)."""
    fn = pickler.loads(pickled_fn)
    fn.setup()
    accumulators: dict = {}
    for key, value in items:
        accumulator = accumulators.get(key)
        if accumulator is None and key not in accumulators:
            accumulator = fn.create_accumulator()
        accumulators[key] = fn.add_input(accumulator, value)
    combined = [(key, fn.compact(accumulator)) for key, accumulator in accumulators.items()]
    fn.teardown()
    return combined


def _merge_and_extract(groups: Iterable, pickled_fn: bytes) -> list:
    """(key, [accumulator]) → (key, output)."""
    fn = pickler.loads(pickled_fn)
    fn.setup()
    outputs = [
        (key, fn.extract_output(fn.merge_accumulators(accumulators)))
        for key, accumulators in groups
    ]
    fn.teardown()
    return outputs


def _select(pairs: Iterable, tag) -> list:
    return [value for t, value in pairs if t == tag]


def _concat(parts: list[list]) -> list:
    return [value for part in parts for value in part]


def _grouped(pair):
    """(key, [(key, value)]) from dask's groupby → (key, [value]), values unwrapped."""
    key, items = pair
    return key, [value.value if isinstance(value, WindowedValue) else value for _, value in items]


def _first(pair):
    return pair[0]


def _drain(part: Iterable) -> list:
    for _ in part:
        pass
    return []


def _task_name(label: str) -> str:
    """A dask key prefix naming the Beam step (seen in the dashboard and task stream)."""
    return "".join(c if c.isalnum() else "-" for c in label).strip("-") or "step"


class _Translator(PipelineVisitor):
    """Turns each leaf transform into `dask.bag` operations, one bag per PCollection."""

    def __init__(self, threads: int, bag_kwargs: dict):
        import dask.bag

        self._db = dask.bag
        self._threads = max(1, threads)
        self._bag_kwargs = bag_kwargs
        self.bags: dict[beam.PCollection, Any] = {}
        self.consumed: set[beam.PCollection] = set()
        self._lifted: AppliedPTransform | None = None  # a CombinePerKey run as one operation

    @property
    def _spread(self) -> int:
        return self._threads * PARTITIONS_PER_THREAD

    def enter_composite_transform(self, node: AppliedPTransform) -> None:
        transform = node.transform
        if (
            self._lifted is None
            and isinstance(transform, beam.CombinePerKey)
            and not transform.args
            and not transform.kwargs
            and not node.side_inputs
        ):
            # Combine each partition's values per key before the shuffle, as Beam's own
            # runners do; the GroupByKey inside would move every element.
            (bag,) = [self.bags[p] for p in node.inputs]
            self.consumed.update(node.inputs)
            fn = pickler.dumps(transform.fn)
            combined = self._group(bag.map_partitions(_precombine, fn))
            self._set_outputs(node, combined.map_partitions(_merge_and_extract, fn))
            self._lifted = node

    def leave_composite_transform(self, node: AppliedPTransform) -> None:
        if node is self._lifted:
            self._lifted = None

    def _group(self, bag):
        """(key, value) → (key, [value]), spread over the cluster's threads.

        The shuffle has one partition per thread (its tasks grow with the square of that);
        each output partition is then cut into PARTITIONS_PER_THREAD pieces, so groups of
        unequal cost (shards) even out over the threads.
        """
        if bag.npartitions != self._threads:
            bag = bag.repartition(self._threads)
        grouped = bag.groupby(_first, shuffle="tasks").map(_grouped)
        return grouped.repartition(self._spread)

    def visit_transform(self, node: AppliedPTransform) -> None:
        if self._lifted is not None:
            return  # inside a lifted CombinePerKey: done as a whole on entering it
        transform = node.transform
        inputs = [self.bags[p] for p in node.inputs if isinstance(p, beam.PCollection)]
        self.consumed.update(p for p in node.inputs if isinstance(p, beam.PCollection))
        self.consumed.update(si.pvalue for si in node.side_inputs)
        kind = type(transform)
        if kind is _Create:
            bag = self._create(transform.values)
        elif kind is _Flatten:
            bag = self._db.concat(inputs) if inputs else self._db.from_sequence([])
        elif kind is _Reshuffle:
            (bag,) = inputs
            bag = bag.repartition(max(bag.npartitions, self._spread))
        elif kind is _GroupByKeyOnly:
            (bag,) = inputs
            bag = self._group(bag)
        elif kind is _GroupAlsoByWindow:
            (bag,) = inputs  # global window: the grouping above is the whole of it
        elif isinstance(transform, beam.ParDo):
            self._pardo(node, inputs)
            return
        else:
            raise NotImplementedError(
                f"the Dask runner cannot run step {node.full_label!r} ({kind.__name__})"
            )
        self._set_outputs(node, bag)

    def _create(self, values):
        values = list(values)
        options = dict(self._bag_kwargs)
        if not options:
            options["npartitions"] = max(1, min(len(values), self._spread))
        return self._db.from_sequence(values, **options)

    def _set_outputs(self, node: AppliedPTransform, bag) -> None:
        for output in node.outputs.values():
            self.bags[output] = bag

    def _pardo(self, node: AppliedPTransform, inputs: list) -> None:
        import dask

        transform = node.transform
        (main,) = inputs
        main_input = next(iter(node.main_inputs.values()))
        args, kwargs = transform.raw_side_inputs
        views = [(type(si), si._view_options()) for si in node.side_inputs]
        side_values = [
            dask.delayed(_concat, pure=True)(self.bags[si.pvalue].to_delayed(optimize_graph=False))
            for si in node.side_inputs
        ]
        spec = {
            "label": node.full_label,
            "window_fn": main_input.windowing.windowfn,
            "args": list(args),
            "kwargs": dict(kwargs),
            "views": views,
        }
        name = _task_name(node.full_label)
        tagged = main.map_partitions(
            _run_bundle,
            pickler.dumps(transform.fn),
            spec,
            *side_values,
            token=f"{name}-{dask.base.tokenize(node.full_label, id(node))}",
        )
        for tag, output in node.outputs.items():
            self.bags[output] = tagged.map_partitions(_select, tag)

    def sinks(self) -> list:
        """The bags nothing consumes: computing them computes the whole pipeline."""
        seen, sinks = set(), []
        for pcollection, bag in self.bags.items():
            if pcollection not in self.consumed and bag.name not in seen:
                seen.add(bag.name)
                sinks.append(bag)
        return sinks


# A build fails when its cluster has had no worker this long (all died, or were stopped: the
# scheduler would otherwise wait for new ones forever), and waits this long for a first one.
NO_WORKERS_SECONDS = 60.0
_POLL_SECONDS = 0.2


class DaskRunnerResult(PipelineResult):
    """The running build; waiting for it closes the client (and a LocalCluster it started)."""

    def __init__(self, client, futures, address=None):
        super().__init__(PipelineState.RUNNING)
        self._client = client
        self._futures = futures
        self._address = address or client.scheduler.address

    def wait_until_finish(self, duration=None):
        if self._state in (PipelineState.DONE, PipelineState.FAILED, PipelineState.CANCELLED):
            return self._state
        try:
            deadline = None if duration is None else time.monotonic() + duration / 1000
            without_workers = None
            while not all(future.done() for future in self._futures):
                if any(future.status == "error" for future in self._futures):
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"the build did not finish in {duration} ms")
                if self._client.nthreads():
                    without_workers = None
                elif without_workers is None:
                    without_workers = time.monotonic()
                elif time.monotonic() - without_workers > NO_WORKERS_SECONDS:
                    raise BuildFailed(no_workers_message(self._address, "has had"))
                time.sleep(_POLL_SECONDS)
            self._client.gather(self._futures)  # the results are empty; raises a task's error
            self._state = PipelineState.DONE
        except BaseException:
            self._state = PipelineState.FAILED
            self._client.cancel(self._futures)
            raise
        finally:
            if self._state != PipelineState.RUNNING:
                self._client.close()
        return self._state

    def cancel(self):
        self._state = PipelineState.CANCELLING
        self._client.cancel(self._futures)
        self._state = PipelineState.CANCELLED
        return self._state

    def metrics(self):
        raise NotImplementedError("the Dask runner reports no Beam metrics")


# The cluster the last pipeline of this process ran on, as (the address asked for, or None for
# a LocalCluster of its own; workers; threads): the build's summary says how many workers ran
# (`local.describe_workers`).
last_cluster: tuple[str | None, int, int] | None = None


class DaskRunner(beam_dask.DaskRunner):
    """Runs a batch pipeline on a `dask.distributed` cluster; see the module docstring."""

    def run_pipeline(self, pipeline, options):
        import dask
        import dask.distributed as ddist

        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(
            drop_default=True, current_only=True
        )
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
        address = dask_options.get("address") or dask_options.get("scheduler_file")
        if not address:
            # A LocalCluster of one single-threaded worker process per core: the image work is
            # Python, so threads of one process would share a GIL (Dask's own default puts
            # 4 threads in each of 4 processes on 16 cores).
            dask_options.setdefault("n_workers", machine.available_cores())
            dask_options.setdefault("threads_per_worker", 1)
        try:
            client = ddist.Client(set_as_default=False, **dask_options)
        except (OSError, TimeoutError) as error:
            if not address:
                raise
            flag = "--dask_client_address" if "address" in dask_options else "--dask_scheduler_file"
            raise ConnectionError(
                f"cannot reach the Dask scheduler at {address} ({flag}): {error}"
            ) from error
        try:
            global last_cluster
            if not client.nthreads():
                logger.info("Waiting for the first worker of %s", client.scheduler.address)
                try:
                    client.wait_for_workers(1, timeout=NO_WORKERS_SECONDS)
                except (TimeoutError, ddist.TimeoutError):
                    raise ConnectionError(
                        no_workers_message(address or client.scheduler.address, "has")
                    ) from None
            threads = sum(client.nthreads().values())
            last_cluster = (address, len(client.nthreads()), threads)
            logger.info(
                "Dask cluster %s: %d workers, %d threads",
                client.scheduler.address,
                len(client.nthreads()),
                threads,
            )
            pipeline.replace_all(dask_overrides())
            translator = _Translator(threads, bag_kwargs)
            pipeline.visit(translator)
            sinks = [bag.map_partitions(_drain) for bag in translator.sinks()]
            futures = client.compute(dask.optimize(*sinks))
        except BaseException:
            client.close()
            raise
        return DaskRunnerResult(client, futures, address)


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
    import dask
    from dask.utils import parse_timedelta
    from distributed.comm.addressing import parse_address, parse_host_port

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
    if not address:
        return
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as error:
        raise ValueError(
            f"--dask_client_address {address}: not a scheduler address ({error}); give "
            "tcp://HOST:PORT, as `dask scheduler` prints it"
        ) from None
    from distributed.comm.registry import backends

    if scheme not in backends:
        raise ValueError(
            f"--dask_client_address {address}: unknown address scheme {scheme!r} (Dask's: "
            f"{', '.join(sorted(backends))}); give tcp://HOST:PORT, as `dask scheduler` prints it"
        )
    if scheme not in ("tcp", "tls"):
        return
    given = dask_options.get("timeout")  # Beam's parse: an int, or a marker for "5s"
    default = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
    timeout = float(given if isinstance(given, (int, float)) and given > 0 else default)
    unreachable = f"cannot reach the Dask scheduler at {address} (--dask_client_address)"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise ValueError(
            f"{unreachable}: {error.strerror or error}; start it (`dask scheduler`) or correct "
            "the address"
        ) from None
    if scheme != "tcp":
        return
    # A scheduler that took the connection answers at once; a server of another kind (a web
    # server, a dashboard) would keep the question unanswered for the whole connect timeout.
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
