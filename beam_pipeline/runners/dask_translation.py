"""From Beam transforms to `dask.bag` operations: what `dask_runner.DaskRunner` computes (see its
docstring for where this differs from Beam's own translation). Every private name of Beam's
Dask runner that this project uses is here."""

from __future__ import annotations

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
)
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

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


def drain(part: Iterable) -> list:
    for _ in part:
        pass
    return []


def _task_name(label: str) -> str:
    """A dask key prefix naming the Beam step (seen in the dashboard and task stream)."""
    return "".join(c if c.isalnum() else "-" for c in label).strip("-") or "step"


class Translator(PipelineVisitor):
    """Turns each leaf transform into `dask.bag` operations, one bag per PCollection."""

    def __init__(self, threads: int, bag_kwargs: dict):
        import dask.bag

        self._db = dask.bag
        self._threads = max(1, threads)
        self._bag_kwargs = bag_kwargs
        self.bags: dict[Any, Any] = {}
        self.consumed: set[beam.PCollection] = set()
        self._lifted: AppliedPTransform | None = None  # a CombinePerKey run as one operation

    @property
    def _spread(self) -> int:
        return self._threads * PARTITIONS_PER_THREAD

    def enter_composite_transform(self, node: AppliedPTransform) -> None:
        transform: Any = node.transform  # Beam types it as Optional[PTransform]
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
        transform: Any = node.transform  # Beam types it as Optional[PTransform]
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

        transform: Any = node.transform  # Beam types it as Optional[PTransform]
        (main,) = inputs
        main_input: Any = next(iter(node.main_inputs.values()))
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
        """The bags nothing consumes: computing them computes the whole pipeline.

        An unread output of a step whose other output is read is none: the step runs for that
        reader. Computed as a sink of its own, it held the step's results until the build's
        end, and a worker lost after the commit had the step (shard writers) run again.
        """
        read_steps = {pcollection.producer for pcollection in self.consumed}
        seen, sinks = set(), []
        for pcollection, bag in self.bags.items():
            if pcollection in self.consumed or pcollection.producer in read_steps:
                continue
            if bag.name not in seen:
                seen.add(bag.name)
                sinks.append(bag)
        return sinks


def bag_kwargs(dask_options: dict) -> dict:
    """The Dask options that shape a `dask.bag` (partitions), from Beam's DaskOptions."""
    return beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
