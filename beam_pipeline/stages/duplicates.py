"""Finding copies among the stored images on the runner (`core.duplicates` has the rules):
ImagePrint batches (one per shard, from the writer) → exact groups (grouped by content hash)
and near pairs (each content hash's representative under each block of its perceptual hash,
grouped by block value, pairs within the radius) → Group, for Finalize's report.

Every step is a GroupByKey or a Map: no step holds every print in one process, on any runner.
"""

from __future__ import annotations

import apache_beam as beam

from beam_pipeline.core import duplicates
from beam_pipeline.core import fingerprints as fp

# Blocks of the perceptual hash: one more than the radius, so two hashes within it share one.
BLOCKS = fp.DEFAULT_RADIUS + 1


def _by_content(batch):
    for print_ in batch:
        yield print_.content, print_


def _exact_and_representative(_, members):
    """The exact group of one content hash (when several images share it) and the one image
    that stands for them in the near search (none when it is nearly uniform)."""
    members = sorted(members)
    group = duplicates.exact_group(members)
    if group is not None:
        yield beam.pvalue.TaggedOutput("groups", group)
    if not members[0].nearly_uniform:
        yield members[0]


def _under_blocks(print_):
    for block, value in fp.blocks(print_.perceptual, BLOCKS):
        yield (block, value), print_


class FindDuplicates(beam.PTransform):
    """Batches of ImagePrint (one per shard) → Group, exact and near."""

    def expand(self, batches):
        by_content = (
            batches
            | "ByContent" >> beam.FlatMap(_by_content)
            | "GroupByContent" >> beam.GroupByKey()
            | "ExactGroups"
            >> beam.FlatMapTuple(_exact_and_representative).with_outputs("groups", main="unique")
        )
        near = (
            by_content.unique
            | "UnderBlocks" >> beam.FlatMap(_under_blocks)
            | "GroupByBlock" >> beam.GroupByKey()
            | "NearPairs"
            >> beam.FlatMapTuple(
                lambda key, members: duplicates.near_pairs(key[0], members, BLOCKS)
            )
        )
        return (by_content.groups, near) | "AllGroups" >> beam.Flatten()
