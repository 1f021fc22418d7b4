"""The first stage, from a tree to index entries: list every directory of the plan, pair files.

Element types (none holds pixels):
  ListingTask → ((directory, bucket), (tag, FileRefs bytes)) → grouped with the VOC split
              memberships of the same group → IndexEntry
Rejections go to the `rejected` output.
"""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import Iterator

import apache_beam as beam
from apache_beam import coders
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


# Files are paired in groups: every key of one directory that hashes to the same one of
# GROUPS_PER_DIRECTORY buckets. The files that share a key always share the group, so each group
# is paired on its own; a listing task sends each group's files as one batch (a directory's
# batches when the walk leaves it), and the pairing shuffle moves a few elements per directory
# instead of one per file. A runner that shuffles in one process (FnApiRunner's coordinator)
# then spends almost nothing per image here, and a flat directory (ImageNet's `val`, VOC's
# JPEGImages) is still paired and parsed on several workers.
GROUPS_PER_DIRECTORY = 16
IMAGE_FILES, ANNOTATION_FILES, LISTED_SPLITS = 0, 1, 2
_TAGS = {layouts.IMAGES: IMAGE_FILES, layouts.ANNOTATIONS: ANNOTATION_FILES}
_FILE_REFS = coders.ListCoder(FileRefCoder())
_MEMBERSHIPS = coders.ListCoder(coders.TupleCoder([coders.StrUtf8Coder(), coders.StrUtf8Coder()]))
_Group = Tuple[str, int]
_Batch = Tuple[_Group, Tuple[int, bytes]]


def pairing_group(key: str) -> tuple[str, int]:
    """(the key's directory, its bucket): where the files of `key` are paired."""
    bucket = zlib.crc32(key.encode("utf-8", "surrogateescape")) % GROUPS_PER_DIRECTORY
    return posixpath.dirname(key), bucket


class _ListFilesFn(beam.DoFn):
    """ListingTask → (pairing group, (IMAGE_FILES or ANNOTATION_FILES, FileRefs bytes))."""

    def process(self, task: layouts.ListingTask):
        tag, pending, directory = _TAGS[task.kind], {}, None
        for item in list_task(task):
            if isinstance(item, Rejection):
                yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(item))
                continue
            _, ref = item
            group = pairing_group(ref.key)
            if group[0] != directory:  # the walk left a directory: send what it found there
                yield from _batches(pending, tag)
                directory = group[0]
            pending.setdefault(group, []).append(ref)
        yield from _batches(pending, tag)


def _batches(pending: dict, tag: int):
    for group, refs in pending.items():
        yield group, (tag, _FILE_REFS.encode(refs))
    pending.clear()


def grouped_memberships(memberships) -> list[tuple[tuple[str, int], tuple[int, bytes]]]:
    """The VOC split lists' (key, split) pairs as one batch per pairing group."""
    groups = {}
    for key, split in memberships:
        groups.setdefault(pairing_group(key), []).append((key, split))
    return [(group, (LISTED_SPLITS, _MEMBERSHIPS.encode(pairs))) for group, pairs in groups.items()]


class _PairFn(beam.DoFn):
    """(pairing group, [(tag, batch bytes)]) → IndexEntry per key and split, or rejections."""

    def __init__(self, root: str):
        self._root = root

    def process(self, element):
        _, batches = element
        images, annotations, splits = {}, {}, {}
        for tag, data in batches:
            if tag == LISTED_SPLITS:
                for key, split in _MEMBERSHIPS.decode(data):
                    splits.setdefault(key, []).append(split)
                continue
            files = images if tag == IMAGE_FILES else annotations
            for ref in _FILE_REFS.decode(data):
                files.setdefault(ref.key, []).append(ref)
        for key in sorted(images.keys() | annotations.keys() | splits.keys()):
            entries, rejections = pairing.pair_files(
                key, images.get(key, ()), annotations.get(key, ()), splits.get(key, ()), self._root
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
            .with_output_types(_Batch)
            .with_outputs(REJECTED, main="files")
        )
        memberships = pbegin | "CreateSplitMemberships" >> beam.Create(
            grouped_memberships(self._plan.memberships)
        ).with_output_types(_Batch)
        paired = (
            (listed.files, memberships)
            | "FlattenByGroup" >> beam.Flatten()
            | "JoinByGroup" >> beam.GroupByKey()
            | "PairFiles"
            >> beam.ParDo(_PairFn(self._plan.root))
            .with_output_types(IndexEntry)
            .with_outputs(REJECTED, main="entries")
        )
        rejected = (listed[REJECTED], paired[REJECTED]) | "FlattenRejected" >> beam.Flatten()
        return paired.entries, rejected
