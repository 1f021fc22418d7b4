"""The first stage, from a tree to index entries: list every directory of the plan, pair files.

Element types (none holds pixels):
  listing part (task index, directory) → ((directory, bucket), (tag, FileRefs bytes)) → grouped
              with the VOC split memberships of the same group → IndexEntry
Each task's tree is listed in parts on many workers: its top LISTED_LEVELS levels one
directory at a time (each directory's subdirectories become the next level's parts), the
subtrees below them whole. The directories every part entered decide, per tree, which ones the
single walk would have refused as entered twice (`listing.revisited`); what was found below
them is dropped. Rejections go to the `rejected` output.
"""

from __future__ import annotations

import os
import posixpath
import socket
import zlib
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam import coders
from apache_beam.metrics import Metrics
from apache_beam.typehints import Tuple

from beam_pipeline.core.entries import FileRef, IndexEntry
from beam_pipeline.core.rejections import METRICS_NAMESPACE, REJECTED, Rejection
from beam_pipeline.failures import BuildFailed
from beam_pipeline.stages import packing
from beam_pipeline.stages.coders import FileRefCoder, RejectionCoder
from beam_pipeline.stages.metrics import count_rejection
from beam_pipeline.tree import layouts, pairing
from beam_pipeline.tree.listing import (
    Entered,
    Listed,
    Subdirectory,
    Unlisted,
    is_below,
    list_directory,
    list_tree,
    revisited,
    walk_subtree,
)
from schemas.paths import is_local


def classify_listed(task: layouts.ListingTask, listed: Listed | Unlisted) -> FileRef | Rejection:
    """What the listing found, as a FileRef or the Rejection of what cannot be one."""
    if isinstance(listed, Unlisted):
        return pairing.unlisted_rejection(task, listed.path, listed.reason, listed.detail)
    return pairing.classify(task, listed.path, listed.num_bytes, listed.file_version)


def list_task(task: layouts.ListingTask) -> Iterator[tuple[str, FileRef] | Rejection]:
    """(kind, FileRef) for each file below the task's directory, or its Rejection."""
    for listed in list_tree(task.directory, task.foreign):
        item = classify_listed(task, listed)
        if isinstance(item, Rejection):
            yield item
        else:
            yield pairing.file_kind(task, item.relative_path), item


# Files are paired in groups: every key of one directory that hashes to the same one of
# GROUPS_PER_DIRECTORY buckets. The files that share a key always share the group, so each group
# is paired on its own; a listing task sends each group's files as one batch (a directory's
# batches when the walk leaves it), and the pairing shuffle moves a few elements per directory
# instead of one per file. A runner that shuffles in one process (FnApiRunner's coordinator)
# then spends almost nothing per image here (a batch of 1 KiB or more crosses zlib-compressed,
# `packing.compress`: a class folder's ~80 files per group shrink 4-6x), and a flat directory
# (ImageNet's `val`, VOC's JPEGImages) is still paired and parsed on several workers.
GROUPS_PER_DIRECTORY = 16
IMAGE_FILES, ANNOTATION_FILES, LISTED_SPLITS, LISTING_REJECTED = 0, 1, 2, 3
_TAGS = {layouts.IMAGES: IMAGE_FILES, layouts.ANNOTATIONS: ANNOTATION_FILES}
_FILE_REFS = coders.ListCoder(FileRefCoder())
# (path as file-system bytes, Rejection): what a listing part could not list or classify.
_LISTING_REJECTIONS = coders.ListCoder(coders.TupleCoder([coders.BytesCoder(), RejectionCoder()]))
_MEMBERSHIPS = coders.ListCoder(coders.TupleCoder([coders.StrUtf8Coder(), coders.StrUtf8Coder()]))
_Group = Tuple[str, int]
_Batch = Tuple[_Group, Tuple[int, bytes]]


def pairing_group(key: str) -> tuple[str, int]:
    """(the key's directory, its bucket): where the files of `key` are paired."""
    bucket = zlib.crc32(key.encode("utf-8", "surrogateescape")) % GROUPS_PER_DIRECTORY
    return posixpath.dirname(key), bucket


# The top levels of a local tree listed one directory at a time: ImageNet's CLS-LOC `train`
# (1,000 class folders) and DET's `ILSVRC2013_train/<synset>` folders are listed in parallel.
LISTED_LEVELS = 2
SUBDIRECTORIES, ENTERED = "subdirectories", "entered"
_Part = Tuple[int, bytes]  # (index of the ListingTask in the plan, directory as file-system bytes)


class _ListPartFn(beam.DoFn):
    """A listing part → (pairing group, (IMAGE_FILES or ANNOTATION_FILES, FileRefs bytes)), and
    its rejections as one batch (LISTING_REJECTED) that `_PairFn` counts unless they lie in a
    refused directory.

    Beside it: the parts of the next level (`SUBDIRECTORIES`) and each directory entered as
    (task index, (path, real path)) (`ENTERED`). Paths are file-system bytes, which any name
    survives. A remote tree is listed whole by one part.
    """

    def __init__(self, tasks: Sequence[layouts.ListingTask], subtree: bool):
        self._tasks = tuple(tasks)
        self._subtree = subtree

    def setup(self):
        """BuildFailed on a worker that does not see the local tree this machine found (an
        empty folder or none at its path): it listed nothing, and the build blamed the tree
        (`split 'train' has no images`) or committed what the other workers listed."""
        for root in {task.root for task in self._tasks if is_local(task.root)}:
            try:
                seen = os.path.isdir(root) and bool(os.listdir(root))
            except OSError:
                seen = False
            if not seen:
                raise BuildFailed(
                    f"a worker ({socket.gethostname()}) does not see the tree at {root}: every "
                    "worker must see --input_dir at the path this machine does (a shared file "
                    "system, mounted alike)"
                )

    def process(self, part):
        index, directory = part
        task = self._tasks[index]
        directory = os.fsdecode(directory)
        if not is_local(task.directory):
            items = list_tree(directory, task.foreign)
        elif self._subtree:
            items = walk_subtree(directory, task.directory)
        else:
            items = list_directory(directory, task.directory)
        pending: dict = {}
        current, rejected = None, []
        for item in items:
            if isinstance(item, Entered):
                entered = os.fsencode(item.path), os.fsencode(item.real)
                yield beam.pvalue.TaggedOutput(ENTERED, (index, entered))
                continue
            if isinstance(item, Subdirectory):
                yield beam.pvalue.TaggedOutput(SUBDIRECTORIES, (index, os.fsencode(item.path)))
                continue
            found = classify_listed(task, item)
            if isinstance(found, Rejection):
                rejected.append((os.fsencode(item.path), found))
                continue
            group = pairing_group(found.key)
            if group[0] != current:  # the walk left a directory: send what it found there
                yield from _batches(pending)
                current = group[0]
            tag = _TAGS[pairing.file_kind(task, found.relative_path)]
            pending.setdefault((group, tag), []).append(found)
        yield from _batches(pending)
        if rejected:
            group = pairing.printable_path(directory), -1  # no pairing group is negative
            yield group, (LISTING_REJECTED, packing.compress(_LISTING_REJECTIONS.encode(rejected)))


def _revisited_of_tree(element, tasks: Sequence[layouts.ListingTask]):
    """(task index, [(path, real path)]) → (path, Rejection) for each directory of the tree that
    the single walk would have refused as entered twice."""
    index, entered = element
    found = revisited(
        (Entered(os.fsdecode(path), os.fsdecode(real)) for path, real in entered),
        tasks[index].directory,
        tasks[index].foreign,
    )
    for unlisted in found:
        rejection = pairing.unlisted_rejection(
            tasks[index], unlisted.path, unlisted.reason, unlisted.detail
        )
        yield os.fsencode(unlisted.path), rejection


def _in_no_split(path: bytes) -> Rejection:
    """The counted report of an image beside the split folders (its path as file-system
    bytes, which any name survives)."""
    return count_rejection(pairing.in_no_split(os.fsdecode(path)))


def _batches(pending: dict):
    """((pairing group, tag) → FileRefs) as (group, (tag, FileRefs bytes)) each, emptied."""
    for (group, tag), refs in pending.items():
        yield group, (tag, packing.compress(_FILE_REFS.encode(refs)))
    pending.clear()


def grouped_memberships(memberships) -> list[tuple[tuple[str, int], tuple[int, bytes]]]:
    """The VOC split lists' (key, split) pairs as one batch per pairing group."""
    groups: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for key, split in memberships:
        groups.setdefault(pairing_group(key), []).append((key, split))
    return [
        (group, (LISTED_SPLITS, packing.compress(_MEMBERSHIPS.encode(pairs))))
        for group, pairs in groups.items()
    ]


class _PairFn(beam.DoFn):
    """(pairing group, [(tag, batch bytes)]) → IndexEntry per key and split, or rejections.

    Side input `refused`: the directories the listing refuses (entered twice); the files below
    them are not paired, and what the listing rejected in or below them is not reported."""

    def __init__(self, root: str):
        self._root = root

    def process(self, element, refused):
        _, batches = element
        refused = [os.fsdecode(path) for path in refused]
        images, annotations, splits = {}, {}, {}
        for tag, packed in batches:
            data = packing.decompress(packed)
            if tag == LISTING_REJECTED:
                for path, rejection in _LISTING_REJECTIONS.decode(data):
                    path = os.fsdecode(path)
                    if not (path in refused or is_below(path, refused)):
                        yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(rejection))
                continue
            if tag == LISTED_SPLITS:
                for key, split in _MEMBERSHIPS.decode(data):
                    splits.setdefault(key, []).append(split)
                continue
            files = images if tag == IMAGE_FILES else annotations
            for ref in _FILE_REFS.decode(data):
                if refused and is_below(posixpath.join(self._root, ref.relative_path), refused):
                    continue  # found below a directory the walk refuses: not listed
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

    Output: a tuple (entries, rejected) of PCollections of IndexEntry and Rejection (with the
    plan's images beside its split folders, `outside`, reported as in no split).
    """

    def __init__(self, plan: layouts.DiscoveryPlan):
        super().__init__()
        self._plan = plan

    def expand(self, pbegin):
        tasks = self._plan.tasks
        parts = pbegin | "CreateListingTasks" >> beam.Create(
            [(index, os.fsencode(task.directory)) for index, task in enumerate(tasks)]
        ).with_output_types(_Part)
        files, entered = [], []
        for level in range(LISTED_LEVELS + 1):
            subtree = level == LISTED_LEVELS
            step = "ListSubtrees" if subtree else f"ListLevel{level}"
            if level:  # (Create spreads the tasks of level 0)
                parts = parts | f"Spread{step}" >> beam.Reshuffle()
            listed = parts | step >> beam.ParDo(_ListPartFn(tasks, subtree)).with_output_types(
                _Batch
            ).with_outputs(SUBDIRECTORIES, ENTERED, main="files")
            files.append(listed.files)
            entered.append(listed[ENTERED])
            parts = listed[SUBDIRECTORIES]
        refusals = (
            entered
            | "FlattenEntered" >> beam.Flatten()
            | "EnteredPerTree" >> beam.GroupByKey()
            | "Revisited" >> beam.FlatMap(_revisited_of_tree, tasks=tasks)
        )
        refused = beam.pvalue.AsList(
            refusals | "RefusedPaths" >> beam.MapTuple(lambda path, _: path)
        )
        refused_rejected = refusals | "CountRefused" >> beam.MapTuple(
            lambda _, rejection: count_rejection(rejection)
        ).with_output_types(Rejection)
        memberships = pbegin | "CreateSplitMemberships" >> beam.Create(
            grouped_memberships(self._plan.memberships)
        ).with_output_types(_Batch)
        paired = (
            [*files, memberships]
            | "FlattenByGroup" >> beam.Flatten()
            | "JoinByGroup" >> beam.GroupByKey()
            | "PairFiles"
            >> beam.ParDo(_PairFn(self._plan.root), refused=refused)
            .with_output_types(IndexEntry)
            .with_outputs(REJECTED, main="entries")
        )
        rejected = [refused_rejected, paired[REJECTED]]
        if self._plan.outside:  # (images beside the split folders; none: the graph as it was)
            rejected.append(
                pbegin
                | "CreateInNoSplit" >> beam.Create([os.fsencode(p) for p in self._plan.outside])
                | "InNoSplit" >> beam.Map(_in_no_split).with_output_types(Rejection)
            )
        return paired.entries, tuple(rejected) | "FlattenRejected" >> beam.Flatten()
