"""Finding copies among the stored images on the runner (`core.quality.duplicates` has the rules):
the writer's ImagePrints (`PrintRuns`), one batch per shard → exact groups (grouped by content hash)
and near pairs (the representative of each content and perceptual hash under each block,
grouped by block value, pairs within the radius) and the odd images, for Finalize's report;
and the training images' prints in one searchable `leaks.TrainingCopies` (`--duplicates
drop_leaks`).

The grouping steps:
  GroupByContent  (content bucket, rows): the prints as plain tuples, one batch per shard.
  ExactGroups     per content bucket, its odd images and its exact groups; its representatives'
                  (split, file name, label, those each stands for) by rank; and, per block and
                  bucket of its value, their perceptual hashes and ids (content bucket << 32 |
                  rank) as uint64 arrays.
  GroupByBlock    (block, value bucket), arrays: 16 bytes a representative and block.
  NearPairs       the pairs within the radius (`hash_search.scan_block`) as rows of ids and
                  distance, one array per block bucket; Finalize names them
                  (`duplicates.copies_of`, unpickling only the buckets the pairs are in).
A runner's cost is per element, and a local runner's shuffle holds what crosses it in its
launcher: the prints cross as batches and the block step as arrays, not one pickled object
per print and block (which held 10.4 GB for ImageNet's 1.33M prints: benchmarks/RESULTS.md,
"Fingerprints"). No step but Finalize holds every name, and it only where pairs were found.
"""

from __future__ import annotations

import collections
import typing

import apache_beam as beam
import numpy as np

from beam_pipeline.core.entries import LabelledEntry
from beam_pipeline.core.images import NormalisedImage
from beam_pipeline.core.quality import duplicates, odd_images
from beam_pipeline.core.quality import fingerprints as fp
from beam_pipeline.core.quality import hash_search as hs
from beam_pipeline.core.quality.duplicates import (
    DUPLICATE,
    EXACT,
    EXACT_GROUPS,
    NAMED,
    NEAR_PAIRS,
    Group,
    ImagePrint,
    Member,
)
from beam_pipeline.core.quality.leaks import Chunk, TrainingCopies
from beam_pipeline.core.rejections import InputError

# Blocks of the perceptual hash: one more than the radius, so two hashes within it share one.
BLOCKS = fp.DEFAULT_RADIUS + 1
# Keys of the groupings: a build's prints spread over BUCKETS groups of content hashes, then
# BLOCKS x BUCKETS groups of block values (ImageNet's 1.33M prints: ~83,000 a group, 1.3 MB).
BUCKETS = 16


def _content_buckets(batch):
    """A shard's prints → (content bucket, rows) per bucket; a row is the print's fields with
    the perceptual hash as an int64: primitives, which a runner encodes without pickling each
    print."""
    buckets = collections.defaultdict(list)
    for p in batch:
        signed = p.perceptual - (1 << 64) if p.perceptual >> 63 else p.perceptual
        row = (p.split, p.filename, p.label, p.content, signed, p.luma_spread, p.chroma_spread)
        row += (p.width, p.height)
        buckets[p.content[0] % BUCKETS].append(row)
    return sorted((bucket, tuple(rows)) for bucket, rows in buckets.items())


def _odd_in(rows):
    """(images, grey ones, their odd ones pickled as (ImagePrint, reasons)) of a content
    bucket's rows; grey counts as odd here, Finalize decides (`odd_images.grey_is_odd`)."""
    odd, grey = [], 0
    for row in rows:  # (an ImagePrint only of an odd one: 2 us a print)
        why = fp.odd_reasons(row[7], row[8], fp.Fingerprint(*row[4:7]))
        if why:
            grey += fp.GREY in why
            odd.append((ImagePrint(*row[:4], row[4] & ((1 << 64) - 1), *row[5:]), why))
    return len(rows), grey, duplicates.pack(odd)


def _exact_and_blocks(bucket, batches):
    """One content bucket: its exact groups, its representatives named by rank, both tagged
    for Finalize; and their hashes and ids per (block, value bucket). A representative is the
    first of the images of one content hash and one perceptual hash, not nearly uniform (a
    converted image and a file of its stored bytes share the first, not always the second:
    `duplicates.leaks_of` judges each image by its own hash, as `leaks.TrainingCopies` does);
    it is named with the others it stands for."""
    by_content = collections.defaultdict(list)
    for batch in batches:
        for row in batch:
            by_content[row[3]].append(row)
    rows = [row for content in by_content.values() for row in content]
    yield beam.pvalue.TaggedOutput("found", (odd_images.ODD, _odd_in(rows)))
    representatives, groups = [], []
    for content in sorted(by_content):
        members = sorted(by_content[content])
        if len(members) > 1:
            groups.append(Group(EXACT, tuple(Member(*m[:3]) for m in members)))
        alike: dict[int, list] = {}  # perceptual hash → its images, not nearly uniform
        for member in members:
            if member[5] > fp.UNIFORM_SPREAD:  # (ImagePrint.nearly_uniform)
                alike.setdefault(member[4], []).append(member)
        representatives += alike.values()
    if groups:
        yield beam.pvalue.TaggedOutput("found", (EXACT_GROUPS, duplicates.pack(groups)))
    if not representatives:
        return
    named = duplicates.pack(
        tuple((*r[0][:3], tuple(m[:3] for m in r[1:])) for r in representatives)
    )
    representatives = [r[0] for r in representatives]
    yield beam.pvalue.TaggedOutput("found", (NAMED, (bucket, named)))
    hashes = np.array([r[4] for r in representatives], dtype=np.int64).view(np.uint64)
    ranks = np.arange(len(hashes), dtype=np.uint64)
    ids = (np.uint64(bucket) << np.uint64(duplicates.RANK_BITS)) | ranks
    for block, (shift, width) in enumerate(hs.block_layout(BLOCKS)):
        values = (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        where = (values % np.uint64(BUCKETS)).astype(np.intp)
        # (Not np.unique: NumPy 2.4's imports numpy.ma, 40 ms of a worker's first call.)
        for value_bucket in np.flatnonzero(np.bincount(where, minlength=BUCKETS)).tolist():
            chosen = where == value_bucket
            yield (block, value_bucket), (hashes[chosen].tobytes(), ids[chosen].tobytes())


def _near_pairs(key, batches):
    """The pairs within the radius whose first shared block is this key's, among the hashes
    of one (block, value bucket): rows of (smaller id, larger id, distance), tagged."""
    block, _ = key
    parts = [(np.frombuffer(h, np.uint64), np.frombuffer(i, np.uint64)) for h, i in batches]
    hashes = np.concatenate([h for h, _ in parts])
    ids = np.concatenate([i for _, i in parts])
    first, second, distance, _ = hs.scan_block(hashes, block, BLOCKS, fp.DEFAULT_RADIUS, None)
    if len(first):
        a, b = ids[first], ids[second]
        rows = np.stack([np.minimum(a, b), np.maximum(a, b), distance.astype(np.uint64)], 1)
        yield NEAR_PAIRS, rows.tobytes()


def image_print(
    labelled: LabelledEntry, sha256: str, found: fp.Fingerprint, width: int, height: int
) -> ImagePrint:
    """What the build keeps of a stored image to find its copies (`core.quality.duplicates`): its
    record's `image/key/sha256` (hex), its fingerprint and its source size (a resize policy
    upscales a tiny source: it is still tiny)."""
    entry, content = labelled.entry, bytes.fromhex(sha256)[: fp.CONTENT_HASH_BYTES]
    return ImagePrint(entry.split, entry.filename, labelled.label, content, *found, width, height)


# Prints are made PRINT_RUN images at a time, after their decodes: right after each decode,
# whose entropy decoding has cooled the caches, a print cost twice as much, and a run's sorts
# and DCTs are one pass (benchmarks/RESULTS.md, "Fingerprints"). A run holds its small decodes.
PRINT_RUN = 32


class PrintRuns:
    """A shard's ImagePrints, in the order its images are written (none under `--duplicates
    off`). Under `--duplicates drop_leaks` (`training`: a TrainingCopies) each is made before
    its image is written, to judge it; otherwise a kept JPEG's in runs, its small decode held
    until then, and a converted image's at once (its RGB is the stored size: 36 MB for a
    4000x3000 PNG)."""

    def __init__(self, training):
        self._training, self._made, self._pending = training, [], []

    def judge(self, labelled: LabelledEntry, image: NormalisedImage, vocabulary) -> None:
        """InputError `duplicate` when the image copies one of the training images, its detail
        naming both classes where they differ."""
        if self._training is None or image.fingerprint is None:
            return
        found = (image.sha256, image.fingerprint, image.source_width, image.source_height)
        copy = self._training.copy_of(image_print(labelled, *found))
        if copy is not None:
            raise InputError(DUPLICATE, copy.detail(labelled.label, vocabulary.names))

    def add(self, labelled: LabelledEntry, image: NormalisedImage) -> None:
        """The print of an image written (made now if `judge` made it)."""
        if image.print_source is None:
            return
        source: fp.Pixels | fp.Fingerprint | None = image.print_source
        if self._training is not None or not isinstance(source, np.ndarray):
            source = image.fingerprint  # (judged: made already; or a conversion's RGB)
        size = (image.source_width, image.source_height)
        self._pending.append((labelled, image.sha256, source, *size))
        if len(self._pending) >= PRINT_RUN:
            self._flush()

    def _flush(self) -> None:
        sources = [p[2] for p in self._pending if not isinstance(p[2], fp.Fingerprint)]
        made = iter(fp.fingerprints(sources) if sources else ())
        for labelled, sha256, source, width, height in self._pending:
            found = source if isinstance(source, fp.Fingerprint) else next(made)
            self._made.append(image_print(labelled, sha256, found, width, height))
        self._pending.clear()

    def made(self) -> list[ImagePrint]:
        """The shard's prints, once its last image is written."""
        self._flush()
        return self._made


class FindDuplicates(beam.PTransform):
    """Batches of ImagePrint (one per shard) → what `duplicates.copies_of` makes the groups
    of: (tag, value) parts, a few per bucket."""

    def expand(self, batches):
        found = (
            batches
            | "ContentBuckets" >> beam.FlatMap(_content_buckets)
            | "GroupByContent" >> beam.GroupByKey()
            | "ExactGroups"
            >> beam.FlatMapTuple(_exact_and_blocks)
            .with_output_types(typing.Any)  # (its outputs are of two types)
            .with_outputs("found", main="blocks")
        )
        near = (
            found.blocks
            | "GroupByBlock" >> beam.GroupByKey()
            | "NearPairs" >> beam.FlatMapTuple(_near_pairs)
        )
        return (found.found, near) | "AllFound" >> beam.Flatten()


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


class TrainingFirst(beam.PartitionFn):
    """`--duplicates drop_leaks`'s shards (split, shard) → partition 0 for the training
    split's, which are written first, 1 for the others'."""

    def __init__(self, split: str | None):
        self._split = split

    def partition_for(self, element, num_partitions, *args, **kwargs) -> int:
        return 0 if element[0][0] == self._split else 1
