"""The first stage, from a tree to index entries: list every directory of the plan, pair files.

Element types (none holds pixels):
  ListingTask → (kind, FileRef) → grouped by key with the VOC split memberships → IndexEntry
Rejections go to the `rejected` output.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.typehints import Tuple

import beam_pipeline.coders  # noqa: F401 - registers the compact element coders
from beam_pipeline import layouts, pairing
from beam_pipeline.entries import FileRef, IndexEntry
from beam_pipeline.listing import Unlisted, list_tree
from beam_pipeline.rejections import METRICS_NAMESPACE, REJECTED, Rejection, count_rejection


def list_task(task: layouts.ListingTask) -> Iterator[tuple[str, FileRef] | Rejection]:
    """(kind, FileRef) for each file below the task's directory, or its Rejection."""
    for listed in list_tree(task.directory):
        if isinstance(listed, Unlisted):
            yield pairing.unlisted_rejection(task, listed.path, listed.reason, listed.detail)
            continue
        item = pairing.classify(task, listed.path, listed.num_bytes)
        yield item if isinstance(item, Rejection) else (task.kind, item)


class _ListFilesFn(beam.DoFn):
    """ListingTask → (kind, FileRef) for each file below the task's directory."""

    def process(self, task: layouts.ListingTask):
        for item in list_task(task):
            if isinstance(item, Rejection):
                yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(item))
            else:
                yield item


class _PairFn(beam.DoFn):
    """(key, {images, annotations, splits}) → IndexEntry per split, or rejections."""

    def __init__(self, root: str):
        self._root = root

    def process(self, element):
        key, grouped = element
        entries, rejections = pairing.pair_files(
            key, grouped["images"], grouped["annotations"], grouped["splits"], self._root
        )
        for rejection in rejections:
            yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(rejection))
        for entry in entries:
            Metrics.counter(METRICS_NAMESPACE, "images_discovered").inc()
            yield entry


class DiscoverImages(beam.PTransform):
    """Lists the tree of a DiscoveryPlan and pairs images with annotations.

    Output: a tuple (entries, rejected) of PCollections of IndexEntry and Rejection.
    """

    def __init__(self, plan: layouts.DiscoveryPlan):
        super().__init__()
        self._plan = plan

    def expand(self, pbegin):
        listed = (
            pbegin
            | "CreateListingTasks" >> beam.Create(self._plan.tasks)
            | "SpreadListingTasks" >> beam.Reshuffle()
            | "ListFiles"
            >> beam.ParDo(_ListFilesFn())
            .with_output_types(Tuple[str, FileRef])
            .with_outputs(REJECTED, main="files")
        )

        def keyed(kind):
            return lambda item: [(item[1].key, item[1])] if item[0] == kind else []

        paired = (
            {
                "images": listed.files | "KeyImages" >> beam.FlatMap(keyed(layouts.IMAGES)),
                "annotations": listed.files
                | "KeyAnnotations" >> beam.FlatMap(keyed(layouts.ANNOTATIONS)),
                "splits": pbegin | "CreateSplitMemberships" >> beam.Create(self._plan.memberships),
            }
            | "JoinByKey" >> beam.CoGroupByKey()
            | "PairFiles"
            >> beam.ParDo(_PairFn(self._plan.root))
            .with_output_types(IndexEntry)
            .with_outputs(REJECTED, main="entries")
        )
        rejected = (listed[REJECTED], paired[REJECTED]) | "FlattenRejected" >> beam.Flatten()
        return paired.entries, rejected
