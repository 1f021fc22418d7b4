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
The translation is in `dask_translation.py`, the checks made before a build in
`dask_preflight.py`.
"""

from __future__ import annotations

import logging
import threading
import time

from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask.overrides import (
    dask_overrides,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from beam_pipeline.failures import BuildFailed
from beam_pipeline.runners import dask_preflight, machine
from beam_pipeline.runners.dask_translation import Translator, bag_kwargs, drain

logger = logging.getLogger(__name__)


_POLL_SECONDS = 0.2


class DaskRunnerResult(PipelineResult):
    """The running build; waiting for it closes the client (and a LocalCluster it started)."""

    def __init__(self, client, futures, address=None):
        super().__init__(PipelineState.RUNNING)
        self._client = client
        self._futures = futures
        self._address = address or client.scheduler.address
        self._finished = threading.Event()  # set as each sink finishes
        for future in futures:
            future.add_done_callback(lambda _: self._finished.set())

    def wait_until_finish(self, duration=None):
        if self._state in (PipelineState.DONE, PipelineState.FAILED, PipelineState.CANCELLED):
            return self._state
        try:
            deadline = None if duration is None else time.monotonic() + duration / 1000
            without_workers = None
            while self._still_running():
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"the build did not finish in {duration} ms")
                if self._client.nthreads():
                    without_workers = None
                elif without_workers is None:
                    without_workers = time.monotonic()
                elif time.monotonic() - without_workers > dask_preflight.NO_WORKERS_SECONDS:
                    raise BuildFailed(dask_preflight.no_workers_message(self._address, "has had"))
                self._wait_for_one()
            self._state = PipelineState.DONE
        except BaseException:
            self._state = PipelineState.FAILED
            self._client.cancel(self._futures)
            raise
        finally:
            if self._state != PipelineState.RUNNING:
                self._client.close()
        return self._state

    def _wait_for_one(self) -> None:
        """Until a sink finishes (then at once: `_still_running` lets it go) or the poll's
        interval has passed."""
        self._finished.wait(_POLL_SECONDS)
        self._finished.clear()

    def _still_running(self) -> bool:
        """Whether a sink is still running. Raises a finished sink's error, else lets go of its
        (empty) result: held, a worker lost later had Dask compute the sink again, and every
        step before it with it (shards written again after the build's commit)."""
        running = []
        for future in self._futures:
            if future.done():
                future.result()
            else:
                running.append(future)
        self._futures = running
        return bool(running)

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
        kwargs = bag_kwargs(dask_options)
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
                    client.wait_for_workers(1, timeout=dask_preflight.NO_WORKERS_SECONDS)
                except (TimeoutError, ddist.TimeoutError):
                    raise ConnectionError(
                        dask_preflight.no_workers_message(
                            address or client.scheduler.address, "has"
                        )
                    ) from None
            different = dask_preflight.other_code(
                client.run(dask_preflight.code_stamp, on_error="return"),
                dask_preflight.code_stamp(),
            )
            if different:
                raise BuildFailed(different)
            threads = sum(client.nthreads().values())
            last_cluster = (address, len(client.nthreads()), threads)
            logger.info(
                "Dask cluster %s: %d workers, %d threads",
                client.scheduler.address,
                len(client.nthreads()),
                threads,
            )
            pipeline.replace_all(dask_overrides())
            translator = Translator(threads, kwargs)
            pipeline.visit(translator)
            sinks = [bag.map_partitions(drain) for bag in translator.sinks()]
            futures = client.compute(dask.optimize(*sinks))
        except BaseException:
            client.close()
            raise
        return DaskRunnerResult(client, futures, address)
