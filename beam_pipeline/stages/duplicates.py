"""Finding copies among the stored images on the runner (`core.duplicates` has the rules):
ImagePrint batches (one per shard, from the writer) → exact groups (grouped by content hash)
and near pairs (each content hash's representative under each block of its perceptual hash,
grouped by block value, pairs within the radius) → Group, for Finalize's report; the odd
images; and the training images' prints in one searchable `leaks.TrainingCopies`
(`--duplicates drop_leaks`).

The grouping steps:
  GroupByContent  (content bucket, rows): the prints as plain tuples, one batch per shard.
  ExactGroups     per content bucket, its exact groups; its representatives' (split, file
                  name, label) once; and, per block and bucket of its value, their perceptual
                  hashes and ids (content bucket << 32 | rank) as two uint64 arrays.
  GroupByBlock    (block, value bucket), arrays: 16 bytes a representative and block.
  NearPairs       the pairs within the radius (`fingerprints.scan_block`), as ids, sent back to
                  the content bucket of each member (one array of halves per bucket).
  ByContent       a bucket's representatives and the halves naming them → each half named.
  ByPair          the named halves, by a bucket of the pair → Group, one batch per bucket.
A runner's cost is per element, and a local runner's shuffle holds what crosses it in its
launcher: the prints cross as batches and the block step as arrays, not one pickled object
per print and block (which held 10.4 GB for ImageNet's 1.33M prints: benchmarks/RESULTS.md,
"Fingerprints"). No step holds every print in one process; the one element per pair bucket
holds the pairs (every pair of a crowded tree: 21,654 of 8,000 images).
"""

from __future__ import annotations

import collections
import pickle
import typing

import apache_beam as beam
import numpy as np

from beam_pipeline.core import duplicates, odd_images
from beam_pipeline.core import fingerprints as fp
from beam_pipeline.core.duplicates import EXACT, NEAR, Group, Member
from beam_pipeline.core.leaks import Chunk, TrainingCopies

# Blocks of the perceptual hash: one more than the radius, so two hashes within it share one.
BLOCKS = fp.DEFAULT_RADIUS + 1
# Keys of the groupings: a build's prints spread over BUCKETS groups of content hashes, then
# BLOCKS x BUCKETS groups of block values (ImageNet's 1.33M prints: ~83,000 a group, 1.3 MB).
BUCKETS = 16
_RANK_BITS = np.uint64(32)
_RANK_MASK = (1 << 32) - 1


def _content_buckets(batch):
    """A shard's prints → (content bucket, rows) per bucket; a row is (split, file name,
    label, content hash, perceptual hash as int64, luma spread): primitives, which a runner
    encodes without pickling each print."""
    buckets = collections.defaultdict(list)
    for p in batch:
        signed = p.perceptual - (1 << 64) if p.perceptual >> 63 else p.perceptual
        row = (p.split, p.filename, p.label, p.content, signed, p.luma_spread)
        buckets[p.content[0] % BUCKETS].append(row)
    return sorted((bucket, tuple(rows)) for bucket, rows in buckets.items())


def _exact_and_blocks(bucket, batches):
    """One content bucket: its exact groups (pickled, in one element), its representatives
    (one image per content hash, not the nearly uniform ones) named once, and their hashes
    and ids per (block, value bucket)."""
    by_content = collections.defaultdict(list)
    for batch in batches:
        for row in batch:
            by_content[row[3]].append(row)
    representatives, groups = [], []
    for content in sorted(by_content):
        members = sorted(by_content[content])
        if len(members) > 1:
            groups.append(Group(EXACT, tuple(Member(*m[:3]) for m in members)))
        if members[0][5] > fp.UNIFORM_SPREAD:  # (ImagePrint.nearly_uniform)
            representatives.append(members[0])
    if groups:
        yield beam.pvalue.TaggedOutput("groups", duplicates.pack_groups(groups))
    if not representatives:
        return
    yield beam.pvalue.TaggedOutput("named", (bucket, tuple(r[:3] for r in representatives)))
    hashes = np.array([r[4] for r in representatives], dtype=np.int64).view(np.uint64)
    ids = (np.uint64(bucket) << _RANK_BITS) | np.arange(len(hashes), dtype=np.uint64)
    for block, (shift, width) in enumerate(fp.block_layout(BLOCKS)):
        values = (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        where = values % np.uint64(BUCKETS)
        for value_bucket in np.unique(where).tolist():
            chosen = where == value_bucket
            yield (block, value_bucket), (hashes[chosen].tobytes(), ids[chosen].tobytes())


def _near_pairs(key, batches):
    """The pairs within the radius whose first shared block is this key's, among the hashes
    of one (block, value bucket) → per content bucket of a member, the halves (first id,
    second id, which of the two it names, distance) as one uint64 array."""
    block, _ = key
    parts = [(np.frombuffer(h, np.uint64), np.frombuffer(i, np.uint64)) for h, i in batches]
    hashes = np.concatenate([h for h, _ in parts])
    ids = np.concatenate([i for _, i in parts])
    first, second, distance, _ = fp.scan_block(hashes, block, BLOCKS, fp.DEFAULT_RADIUS, None)
    if not len(first):
        return
    a, b = ids[first], ids[second]
    low, high = np.minimum(a, b), np.maximum(a, b)
    distance = distance.astype(np.uint64)
    for which, named in ((0, low), (1, high)):
        halves = np.stack([low, high, np.full_like(low, which), distance], axis=1)
        buckets = named >> _RANK_BITS
        for content_bucket in np.unique(buckets).tolist():
            yield content_bucket, halves[buckets == content_bucket].tobytes()


def _name_halves(bucket, values):
    """A content bucket's representatives and the halves naming them → (pair bucket, the
    halves as (first id, second id, which, distance, member)), one batch per pair bucket."""
    named, halves = (), []
    for value in values:
        if isinstance(value, bytes):
            halves.append(np.frombuffer(value, np.uint64).reshape(-1, 4))
        else:
            named = value
    by_pair = collections.defaultdict(list)
    for low, high, which, distance in np.concatenate([np.zeros((0, 4), np.uint64), *halves]):
        member = named[int(high if which else low) & _RANK_MASK]
        by_pair[int(low) % BUCKETS].append((int(low), int(high), int(which), int(distance), member))
    for pair_bucket, found in sorted(by_pair.items()):
        yield pair_bucket, tuple(found)


def _pairs(_, batches):
    """A pair bucket's named halves → its near pairs as Groups, pickled in one element."""
    by_pair = collections.defaultdict(dict)
    for batch in batches:
        for low, high, which, distance, member in batch:
            by_pair[(low, high)][which] = (distance, Member(*member))
    groups = []
    for halves in by_pair.values():
        (distance, first), (_, second) = halves[0], halves[1]
        groups.append(Group(NEAR, tuple(sorted((first, second))), distance))
    if groups:
        yield duplicates.pack_groups(groups)


class FindDuplicates(beam.PTransform):
    """Batches of ImagePrint (one per shard) → the groups, exact and near, a batch of them per
    bucket (`duplicates.pack_groups`)."""

    def expand(self, batches):
        found = (
            batches
            | "ContentBuckets" >> beam.FlatMap(_content_buckets)
            | "GroupByContent" >> beam.GroupByKey()
            | "ExactGroups"
            >> beam.FlatMapTuple(_exact_and_blocks)
            .with_output_types(typing.Any)  # (its outputs are of three types)
            .with_outputs("groups", "named", main="blocks")
        )
        halves = (
            found.blocks
            | "GroupByBlock" >> beam.GroupByKey()
            | "NearPairs" >> beam.FlatMapTuple(_near_pairs)
        )
        near = (
            (found.named, halves)
            | "NamedAndHalves" >> beam.Flatten()
            | "ByContent" >> beam.GroupByKey()
            | "NameHalves" >> beam.FlatMapTuple(_name_halves)
            | "ByPair" >> beam.GroupByKey()
            | "Pairs" >> beam.FlatMapTuple(_pairs)
        )
        return (found.groups, near) | "AllGroups" >> beam.Flatten()


class _TrainingCopiesFn(beam.CombineFn):
    """Batches of training ImagePrint → TrainingCopies (its columns cross, not the prints)."""

    def create_accumulator(self):
        return []

    def add_input(self, chunks, batch):
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


def _grey_tally(batch):
    return len(batch), sum(odd_images.is_grey(print_) for print_ in batch)


def _odd_in(batch, totals):
    """A shard's odd images, as (ImagePrint, reasons) pairs pickled in one element."""
    grey_odd = odd_images.grey_is_odd(*totals)
    found = [(print_, odd_images.reasons(print_, grey_odd)) for print_ in batch]
    found = [(print_, why) for print_, why in found if why]
    if found:
        yield pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)


class FindOddImages(beam.PTransform):
    """Batches of ImagePrint → the odd images of each, pickled (`odd_images`): grey is odd
    when most of the build's images are colour, so the build's grey share comes first."""

    def expand(self, batches):
        totals = (
            batches
            | "GreyTally" >> beam.Map(_grey_tally)
            | "GreyShare" >> beam.CombineGlobally(beam.combiners.TupleCombineFn(sum, sum))
        )
        return batches | "OddImages" >> beam.FlatMap(_odd_in, beam.pvalue.AsSingleton(totals))
