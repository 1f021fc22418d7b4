"""Finding copies among the stored images on the runner (`core.duplicates` has the rules):
each shard's ImagePrints (from its writer) → exact groups and near pairs, by one grouping of
the prints' perceptual hashes under each of their blocks (multi-index hashing: two hashes
within the radius share a block; copies share them all), for Finalize's report; and the
training images' prints in one searchable `leaks.TrainingCopies` (`--duplicates drop_leaks`).

  ShardParts    fused with the shard's writer: its odd images and its images' (split, file
                name, label) by position, tagged for Finalize; and, per block and bucket of its
                value, their hashes, ids ((split, shard) << 32 | position) and content hashes
                as arrays (block 0: every image, with whether it is nearly uniform; the others:
                those that are not).
  GroupByBlock  (block, value bucket), arrays: 33 bytes an image in block 0, 32 in the others.
  BlockGroups   block 0's groups: the exact groups (one content hash, ids); every group: one
                image of each content hash (its smallest id; copies lie in the same groups) and
                the pairs within the radius (`fingerprints.scan_block`) as rows of ids and
                distance; Finalize names them (`duplicates.groups_of`, unpickling only the
                shards the groups are in).
A runner's cost is per element and per grouping, and a local runner's shuffle holds what
crosses it in its launcher: the prints cross once, as arrays, not one pickled object per print
and block (which held 10.4 GB for ImageNet's 1.33M prints: benchmarks/RESULTS.md,
"Fingerprints"). No step but Finalize holds every name, and it only where copies were found.
"""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np

from beam_pipeline.core import duplicates, odd_images
from beam_pipeline.core import fingerprints as fp
from beam_pipeline.core.duplicates import EXACT_GROUPS, NAMED, NEAR_PAIRS, RANK_BITS, ImagePrint
from beam_pipeline.core.leaks import Chunk, TrainingCopies

# Blocks of the perceptual hash: one more than the radius, so two hashes within it share one.
BLOCKS = fp.DEFAULT_RADIUS + 1
# Buckets of each block's values: a build's prints spread over BLOCKS x BUCKETS groups
# (ImageNet's 1.33M prints: ~83,000 a group, 2-3 MB).
BUCKETS = 16
# A shard's place in the ids: its split's (among the build's, sorted) above its index.
_SHARD_BITS = 24
_CONTENT = fp.CONTENT_HASH_BYTES


def shard_key(splits: typing.Collection[str], split: str, index: int) -> int:
    """The number of shard `index` of `split` among the build's `splits`: the high bits of
    its images' ids."""
    return sorted(splits).index(split) << _SHARD_BITS | index


def _odd_in(batch: typing.Sequence[ImagePrint]):
    """(images, grey ones, their odd ones pickled as (ImagePrint, reasons)) of a shard's
    prints; grey counts as odd here, Finalize decides (`odd_images.grey_is_odd`)."""
    odd = [(image, why) for image in batch if (why := odd_images.reasons(image, grey_odd=True))]
    return len(batch), sum(map(odd_images.is_grey, batch)), duplicates.pack(odd)


def _shard_parts(element, plans):
    """One shard's prints → its parts for Finalize (tagged) and its arrays per (block, value
    bucket)."""
    (split, index), batch = element
    if not batch:
        return
    yield beam.pvalue.TaggedOutput("found", (odd_images.ODD, _odd_in(batch)))
    key = shard_key(plans, split, index)
    named = duplicates.pack(tuple((p.split, p.filename, p.label) for p in batch))
    yield beam.pvalue.TaggedOutput("found", (NAMED, (key, named)))
    hashes = np.array([p.perceptual for p in batch], dtype=np.uint64)
    ids = (np.uint64(key) << np.uint64(RANK_BITS)) | np.arange(len(batch), dtype=np.uint64)
    contents = np.frombuffer(b"".join(p.content for p in batch), np.uint8).reshape(-1, _CONTENT)
    uniform = np.array([p.nearly_uniform for p in batch])
    for block, (shift, width) in enumerate(fp.block_layout(BLOCKS)):
        chosen = np.ones(len(batch), bool) if block == 0 else ~uniform
        values = (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        where = values % np.uint64(BUCKETS)
        for bucket in np.unique(where[chosen]).tolist():
            rows = chosen & (where == bucket)
            flags = uniform[rows].tobytes() if block == 0 else b""
            content = contents[rows].tobytes()
            yield (block, bucket), (hashes[rows].tobytes(), ids[rows].tobytes(), content, flags)


def _block_group(key, parts):
    """One (block, value bucket): block 0's exact groups, and the pairs within the radius whose
    first shared block is this one, among one image of each content hash (its smallest id):
    tagged rows of ids."""
    block, _ = key
    parts = list(parts)
    hashes = np.concatenate([np.frombuffer(p[0], np.uint64) for p in parts])
    ids = np.concatenate([np.frombuffer(p[1], np.uint64) for p in parts])
    contents = np.concatenate([np.frombuffer(p[2], np.uint8) for p in parts])
    columns = contents.reshape(-1, _CONTENT).view(">u8")  # (the ordering of the bytes)
    order = np.lexsort((ids, *columns.T[::-1]))
    columns, ids, hashes = columns[order], ids[order], hashes[order]
    first = np.ones(len(ids), bool)
    first[1:] = (columns[1:] != columns[:-1]).any(axis=1)
    chosen = first
    if block == 0:
        uniform = np.concatenate([np.frombuffer(p[3], bool) for p in parts])[order]
        chosen = first & ~uniform
        starts = np.flatnonzero(first)
        lengths = np.diff(np.append(starts, len(ids)))
        if (lengths > 1).any():
            runs = np.repeat(lengths > 1, lengths)
            yield EXACT_GROUPS, (ids[runs].tobytes(), lengths[lengths > 1].tobytes())
    hashes, ids = hashes[chosen], ids[chosen]
    a, b, distance, _ = fp.scan_block(hashes, block, BLOCKS, fp.DEFAULT_RADIUS, None)
    if len(a):
        a, b = ids[a], ids[b]
        rows = np.stack([np.minimum(a, b), np.maximum(a, b), distance.astype(np.uint64)], 1)
        yield NEAR_PAIRS, rows.tobytes()


class FindDuplicates(beam.PTransform):
    """((split, shard), ImagePrints) of each shard → what `duplicates.groups_of` makes the
    groups of: (tag, value) parts, a few per shard and per group of hashes. `plans`: the
    shard plans by split (`AssignShards`), whose splits number the shards."""

    def __init__(self, plans):
        super().__init__()
        self._plans = plans

    def expand(self, batches):
        found = batches | "ShardParts" >> beam.FlatMap(
            _shard_parts, plans=beam.pvalue.AsDict(self._plans)
        ).with_output_types(typing.Any).with_outputs("found", main="blocks")
        near = (
            found.blocks
            | "GroupByBlock" >> beam.GroupByKey()
            | "BlockGroups" >> beam.FlatMapTuple(_block_group)
        )
        return (found.found, near) | "AllFound" >> beam.Flatten()


class _TrainingCopiesFn(beam.CombineFn):
    """((split, shard), ImagePrints) of the training shards → TrainingCopies (its columns
    cross, not the prints)."""

    def create_accumulator(self):
        return []

    def add_input(self, chunks, element):
        _, batch = element
        if batch:
            chunks.append(Chunk.of(batch))
        return chunks

    def merge_accumulators(self, accumulators):
        return [chunk for chunks in accumulators for chunk in chunks]

    def extract_output(self, chunks):
        return TrainingCopies(chunks)


def training_copies(prints):
    """The training writers' batches of ImagePrint → a singleton TrainingCopies (empty when
    the build writes no training image)."""
    return prints | "TrainingCopies" >> beam.CombineGlobally(_TrainingCopiesFn())


class TrainingFirst(beam.PartitionFn):
    """`--duplicates drop_leaks`'s shards (split, shard) → partition 0 for the training
    split's, which are written first, 1 for the others'."""

    def __init__(self, split: str | None):
        self._split = split

    def partition_for(self, element, num_partitions, *args, **kwargs) -> int:
        return 0 if element[0][0] == self._split else 1
