"""Finding copies among the stored images on the runner (`core.duplicates` has the rules):
ImagePrint batches (one per shard, from the writer) → exact groups (grouped by content hash)
and near pairs (each content hash's representative under each block of its perceptual hash,
grouped by block value, pairs within the radius) → Group, for Finalize's report; and the
training images' prints in one searchable `leaks.TrainingCopies` (`--duplicates drop_leaks`).

No step holds every print in one process, on any runner: the prints cross two GroupByKeys,
keyed by a bucket of the content hash, then by a block and a bucket of its value. They cross
in batches (one per shard and key), since a runner's cost is per element: one element per
print and block cost a 2-core build 12% of its throughput (benchmarks/RESULTS.md,
"Fingerprints"); each bucket then groups its prints by the exact key in Python.
"""

from __future__ import annotations

import collections
import pickle

import apache_beam as beam

from beam_pipeline.core import duplicates, odd_images
from beam_pipeline.core import fingerprints as fp
from beam_pipeline.core.leaks import Chunk, TrainingCopies

# Blocks of the perceptual hash: one more than the radius, so two hashes within it share one.
BLOCKS = fp.DEFAULT_RADIUS + 1
# Keys of the two groupings: a build's prints spread over BUCKETS groups of content hashes,
# then BLOCKS x BUCKETS groups of block values (ImageNet's 1.33M prints: ~80,000, 5 MB a group).
BUCKETS = 16


def _by_bucket(prints, key):
    """(bucket, tuple of prints) for each bucket that some of `prints` fall in."""
    buckets = collections.defaultdict(list)
    for print_ in prints:
        buckets[key(print_)].append(print_)
    return sorted((bucket, tuple(members)) for bucket, members in buckets.items())


def _content_buckets(batch):
    return _by_bucket(batch, lambda print_: print_.content[0] % BUCKETS)


def _exact_and_representatives(_, batches):
    """The exact groups of one bucket of content hashes (several images of one hash), and the
    images that stand for each hash in the near search (not the nearly uniform ones)."""
    by_content = collections.defaultdict(list)
    for batch in batches:
        for print_ in batch:
            by_content[print_.content].append(print_)
    representatives, groups = [], []
    for content in sorted(by_content):
        members = sorted(by_content[content])
        group = duplicates.exact_group(members)
        if group is not None:
            groups.append(group)
        if not members[0].nearly_uniform:
            representatives.append(members[0])
    if groups:
        yield beam.pvalue.TaggedOutput("groups", duplicates.pack_groups(groups))
    yield from _by_bucket(  # plain tuples: a runner pickles them 5x faster than the prints
        ((block, value, print_.member, print_.perceptual) for print_ in representatives
         for block, value in fp.blocks(print_.perceptual, BLOCKS)),
        lambda item: (item[0], item[1] % BUCKETS),
    )  # fmt: skip


def _near_pairs(key, batches):
    """The pairs within the radius among the representatives under one block's bucket."""
    block, _ = key
    by_value = collections.defaultdict(list)
    for batch in batches:
        for _, value, member, perceptual in batch:
            by_value[value].append((member, perceptual))
    pairs = []
    for value in sorted(by_value):
        if len(by_value[value]) > 1:
            pairs += duplicates.near_pairs(block, by_value[value], BLOCKS)
    if pairs:
        yield duplicates.pack_groups(pairs)


class FindDuplicates(beam.PTransform):
    """Batches of ImagePrint (one per shard) → the groups, exact and near, a batch of them per
    bucket (`duplicates.pack_groups`)."""

    def expand(self, batches):
        by_content = (
            batches
            | "ContentBuckets" >> beam.FlatMap(_content_buckets)
            | "GroupByContent" >> beam.GroupByKey()
            | "ExactGroups"
            >> beam.FlatMapTuple(_exact_and_representatives).with_outputs("groups", main="blocks")
        )
        near = (
            by_content.blocks
            | "GroupByBlock" >> beam.GroupByKey()
            | "NearPairs" >> beam.FlatMapTuple(_near_pairs)
        )
        return (by_content.groups, near) | "AllGroups" >> beam.Flatten()


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
