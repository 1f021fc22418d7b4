"""The first stage, from a tree to index entries: list every directory of the plan, pair files.

Element types (none holds pixels):
  ListingTask → (key, (tag, FileRef bytes)) → grouped by key with the VOC split memberships
              → IndexEntry
Rejections go to the `rejected` output.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.typehints import Tuple

from beam_pipeline import layouts, pairing
from beam_pipeline.coders import FileRefCoder
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


# What each value grouped by pairing key holds: a listed image or annotation (FileRef bytes), or
# a split that a VOC list names the key in. Values cross the shuffle as bytes, so a runner that
# groups in one process (FnApiRunner) moves them without decoding or re-encoding each one.
IMAGE_FILE, ANNOTATION_FILE, LISTED_SPLIT = 0, 1, 2
_TAGS = {layouts.IMAGES: IMAGE_FILE, layouts.ANNOTATIONS: ANNOTATION_FILE}
_FILE_REF = FileRefCoder()
_Tagged = Tuple[str, Tuple[int, bytes]]


class _ListFilesFn(beam.DoFn):
    """ListingTask → (key, (IMAGE_FILE or ANNOTATION_FILE, FileRef bytes)) for each file."""

    def process(self, task: layouts.ListingTask):
        for item in list_task(task):
            if isinstance(item, Rejection):
                yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(item))
            else:
                kind, ref = item
                yield ref.key, (_TAGS[kind], _FILE_REF.encode(ref))


def _membership(key_split: tuple[str, str]) -> tuple[str, tuple[int, bytes]]:
    key, split = key_split
    return key, (LISTED_SPLIT, split.encode("utf-8"))


class _PairFn(beam.DoFn):
    """(key, [(tag, bytes)]) → IndexEntry per split, or rejections."""

    def __init__(self, root: str):
        self._root = root

    def process(self, element):
        key, tagged = element
        images, annotations, splits = [], [], []
        for tag, data in tagged:
            if tag == LISTED_SPLIT:
                splits.append(data.decode("utf-8"))
            else:
                (images if tag == IMAGE_FILE else annotations).append(_FILE_REF.decode(data))
        entries, rejections = pairing.pair_files(key, images, annotations, splits, self._root)
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
            .with_output_types(_Tagged)
            .with_outputs(REJECTED, main="files")
        )
        memberships = (
            pbegin
            | "CreateSplitMemberships" >> beam.Create(self._plan.memberships)
            | "TagSplits" >> beam.Map(_membership).with_output_types(_Tagged)
        )
        paired = (
            (listed.files, memberships)
            | "FlattenByKey" >> beam.Flatten()
            | "JoinByKey" >> beam.GroupByKey()
            | "PairFiles"
            >> beam.ParDo(_PairFn(self._plan.root))
            .with_output_types(IndexEntry)
            .with_outputs(REJECTED, main="entries")
        )
        rejected = (listed[REJECTED], paired[REJECTED]) | "FlattenRejected" >> beam.Flatten()
        return paired.entries, rejected
