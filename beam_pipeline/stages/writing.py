"""The writing stages, from labelled entries to shard files: assign shards, write shards.

Element types:
  LabelledEntry → packed batches of them (`packing`) → ((split, shard), batch of
                (sort key, LabelledEntry bytes)) → grouped by shard, ranked → ShardResult
  and, beside it, (split, (bucket, bytes)) → (split, SplitPlan) as a side input.
Only index records are grouped; the shard writer reads each image itself and streams the
encoded records into a temp file that is renamed into place when complete
(`output.incomplete_file`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import socket

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.typehints import Tuple

from beam_pipeline.console import watch
from beam_pipeline.core import sharding
from beam_pipeline.core.entries import LabelledEntry, ShardResult
from beam_pipeline.core.examples import build_example
from beam_pipeline.core.images import ImagePolicy, NormalisedImage, normalise_image
from beam_pipeline.core.jpegdata import KEPT_STRAY_JPEG_BYTES
from beam_pipeline.core.labels import Vocabulary
from beam_pipeline.core.rejections import IMAGE, METRICS_NAMESPACE, REJECTED, InputError, Rejection
from beam_pipeline.failures import BuildFailed
from beam_pipeline.output.directory import OWNER_FILE, incomplete_file, shard_path
from beam_pipeline.stages import packing, resume
from beam_pipeline.stages.coders import LabelledEntryCoder
from beam_pipeline.stages.duplicates import PrintRuns
from beam_pipeline.stages.metrics import count_rejection
from beam_pipeline.tree.fileio import READ_AHEAD_FILES, read_ahead
from schemas import UNLABELLED, ShardInfo, shard_filename
from schemas.paths import join
from schemas.tfrecord import encode_record

PRINTS = "prints"  # the tagged output of each shard's ImagePrints


def split_size(labelled: LabelledEntry, seed: int) -> tuple[str, tuple[int, int]]:
    """(split, (bucket, image bytes)): what the split's plan counts of one entry."""
    entry = labelled.entry
    bucket = sharding.bucket_of(sharding.sort_key(seed, entry.split, entry.key))
    return entry.split, (bucket, entry.num_bytes)


class _SplitSizesFn(beam.CombineFn):
    """(bucket, bytes) values → ({bucket: count}, total bytes): a split's plan, in one value.

    One accumulator per split and bundle crosses the shuffle (a dict of the buckets seen), not
    one element per bucket.
    """

    def create_accumulator(self):
        return {}, 0

    def add_input(self, accumulator, value):
        counts, size = accumulator
        bucket, num_bytes = value
        counts[bucket] = counts.get(bucket, 0) + 1
        return counts, size + num_bytes

    def merge_accumulators(self, accumulators):
        merged, total = {}, 0
        for counts, size in accumulators:
            for bucket, count in counts.items():
                merged[bucket] = merged.get(bucket, 0) + count
            total += size
        return merged, total

    def extract_output(self, accumulator):
        return accumulator


class _PlanSplitFn(beam.DoFn):
    def __init__(self, num_shards: dict[str, int | None], target_shard_bytes: int):
        self._num_shards = num_shards
        self._target = target_shard_bytes

    def process(self, element):
        split, (counts, num_bytes) = element
        yield (
            split,
            sharding.plan_split(counts, num_bytes, self._num_shards.get(split), self._target),
        )


# The entries cross the shard shuffle as bytes, so a runner that groups in one process
# (FnApiRunner) moves them without decoding or re-encoding each one; in batches, one per shard
# and bundle (or per FLUSH_BYTES of a bundle), so it groups a few elements per shard instead of
# one per entry; and compressed (`packing`), so it relays a third of the bytes.
_LABELLED = LabelledEntryCoder()
FLUSH_BYTES = packing.FLUSH_BYTES  # what a bundle's batches of every shard may hold, together


def encode_members(members: list[tuple[bytes, bytes]]) -> bytes:
    """A batch of one shard's (sort key, LabelledEntry bytes) members, as it crosses the shuffle."""
    return packing.pack([key + data for key, data in members])


def decode_members(batch: bytes) -> list[tuple[bytes, bytes]]:
    size = sharding.SORT_KEY_BYTES
    return [(member[:size], member[size:]) for member in packing.unpack(batch)]


class _KeyByShardFn(beam.DoFn):
    """A packed batch of LabelledEntry → ((split, shard), [(sort key, entry bytes)] bytes): each
    entry joins the batch of every shard its bucket overlaps; a bundle's batches leave when it
    ends."""

    def __init__(self, seed: int):
        self._seed = seed

    def start_bundle(self):
        self._pending: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
        self._pending_bytes = 0

    def process(self, packed: bytes, plans):
        for data in packing.unpack(packed):
            entry = _LABELLED.decode(data).entry
            key = sharding.sort_key(self._seed, entry.split, entry.key)
            for shard in plans[entry.split].shards_of_bucket(sharding.bucket_of(key)):
                self._pending.setdefault((entry.split, shard), []).append((key, data))
                self._pending_bytes += len(key) + len(data)
            if self._pending_bytes >= FLUSH_BYTES:
                yield from self._batches()

    def finish_bundle(self):
        for batch in self._batches():
            yield packing.in_global_window(batch)

    def _batches(self):
        for shard, members in self._pending.items():
            yield shard, encode_members(members)
        self._pending.clear()
        self._pending_bytes = 0


class AssignShards(beam.PTransform):
    """LabelledEntry → ((split, shard), batch of (sort key, LabelledEntry bytes)), a few batches
    per shard; also returns the plans.

    `num_shards` maps each output split to its requested shard count (None: size-based). Each
    entry goes to the shard its rank falls in and, when its bucket straddles a shard boundary,
    to the neighbour too: the writer ranks them (`sharding.rank_shard`).
    Output: (assigned, plans) where plans is a PCollection of (split, SplitPlan).
    """

    def __init__(self, seed: int, num_shards: dict[str, int | None], target_shard_bytes: int):
        super().__init__()
        self._seed = seed
        self._num_shards = num_shards
        self._target = target_shard_bytes

    def expand(self, labelled):
        plans = (
            labelled
            | "SplitSizes"
            >> beam.Map(split_size, seed=self._seed).with_output_types(Tuple[str, Tuple[int, int]])
            | "SumPerSplit" >> beam.CombinePerKey(_SplitSizesFn())
            | "PlanSplits" >> beam.ParDo(_PlanSplitFn(self._num_shards, self._target))
        )
        # The entries wait for the plans packed; the shard batches reuse their bytes as they are.
        packed = labelled | "Pack" >> packing.Pack(_LABELLED)
        assigned = packed | "KeyByShard" >> beam.ParDo(
            _KeyByShardFn(self._seed), plans=beam.pvalue.AsDict(plans)
        ).with_output_types(Tuple[Tuple[str, int], bytes])
        return assigned, plans


def rank_members(batches, plan: sharding.SplitPlan, index: int) -> list:
    """A shard's batches of (sort key, LabelledEntry bytes) → its (rank, LabelledEntry), in
    rank order."""
    decoded = []
    for batch in batches:
        for key, data in decode_members(batch):
            labelled = _LABELLED.decode(data)
            decoded.append((key, labelled.entry.key, labelled))
    try:
        return sharding.rank_shard(decoded, plan, index)
    except sharding.ShardPlanMismatch as error:
        raise BuildFailed(f"{error}; the runner lost or repeated index records") from error


class _WriteShardFn(beam.DoFn):
    """((split, shard), [batch of (sort key, LabelledEntry bytes)]) → ShardResult, streaming
    images to the file."""

    def __init__(
        self, input_dir: str, output_dir: str, policy: ImagePolicy, resume: bool, staged: bool
    ):
        self._input_dir = input_dir
        self._output_dir = output_dir
        self._policy = policy
        self._resume = resume
        self._staged = staged

    def setup(self):
        from PIL import Image

        # Our own max_pixels check refuses bombs; Pillow's must not be stricter than it.
        Image.MAX_IMAGE_PIXELS = max(Image.MAX_IMAGE_PIXELS or 0, self._policy.max_pixels)
        if not FileSystems.exists(join(self._output_dir, OWNER_FILE)):  # (written first)
            # A worker that sees another folder at the path wrote its shards there: the build
            # then said "expected N bytes, found no file", or failed reading its own metadata.
            raise BuildFailed(
                f"a worker ({socket.gethostname()}) does not see the output directory "
                f"{self._output_dir} (its {OWNER_FILE}, written when the build began, is not "
                "there): every worker must see --output_dir at the path this machine does, "
                "and the directory must stay there until the build ends"
            )
        self._reader = concurrent.futures.ThreadPoolExecutor(
            READ_AHEAD_FILES, thread_name_prefix="read-ahead"
        )
        self._written = Metrics.counter(METRICS_NAMESPACE, "images_written")
        self._reencoded = Metrics.counter(METRICS_NAMESPACE, "images_reencoded")
        self._kept = Metrics.counter(METRICS_NAMESPACE, "shards_kept_on_resume")

    def teardown(self):
        reader = getattr(self, "_reader", None)  # None when setup failed before creating it
        if reader is not None:
            reader.shutdown(wait=False, cancel_futures=True)

    def process(self, element, vocabulary: Vocabulary, plans, gate=None, training=None):
        """`training`: the training images' TrainingCopies, for a held-out split's writer under
        `--duplicates drop_leaks` (a copy of a training image is rejected, not stored)."""
        (split, index), members = element
        members = rank_members(members, plans[split], index)
        num_shards = plans[split].num_shards
        name = shard_filename(split, index, num_shards)
        checked = training.digest() if training is not None else None
        shard_print = resume.fingerprint(
            split, index, num_shards, members, vocabulary, self._policy, checked
        )
        tally = watch.Tally(self._output_dir, watch.WRITTEN, name)
        path = shard_path(name, staged=self._staged)
        done = self._resume and resume.load_completed(
            self._output_dir, path, shard_print, self._input_dir
        )
        if done:
            self._kept.inc()
            result, rejections, prints = done
            tally.add(result.shard.num_examples + len(rejections))
        else:
            result, rejections, prints = self._write(
                split, index, num_shards, name, path, members, vocabulary, tally, training
            )
            try:
                resume.save(
                    self._output_dir, shard_print, result, rejections, prints, self._input_dir
                )
            except OSError as error:  # the output's fault, as in `_write`
                raise BuildFailed(
                    f"cannot write the progress record of shard {name} to {self._output_dir}: "
                    f"{error}"
                ) from error
        tally.flush()
        for rejection in rejections:
            yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(rejection))
        yield beam.pvalue.TaggedOutput(PRINTS, tuple(prints))
        yield result

    def _write(self, split, index, num_shards, name, path, members, vocabulary, tally, training):
        """Streams the shard into a temp file and renames it to `path` in the output."""
        counts, rejections, prints = _ShardCounts(), [], PrintRuns(training)
        inputs = [
            (join(self._input_dir, labelled.entry.filename), labelled.entry.num_bytes)
            for _, labelled in members
        ]
        try:
            with incomplete_file(self._output_dir, path) as temp_path:
                out = FileSystems.create(temp_path, compression_type=CompressionTypes.UNCOMPRESSED)
                with out, contextlib.closing(read_ahead(inputs, self._reader)) as reads:
                    for (_, labelled), (image_path, _), data in zip(
                        members, inputs, reads, strict=True
                    ):
                        tally.add()
                        try:
                            record, image = self._encode(labelled, data.result(), vocabulary)
                            prints.judge(labelled, image, vocabulary)
                        except InputError as error:
                            rejections.append(
                                Rejection.from_error(
                                    error, split=split, path=image_path, stage=IMAGE
                                )
                            )
                            continue
                        if image.note:  # kept on the user's flag: listed as reported
                            rejections.append(_kept_report(split, image_path, image.note))
                        out.write(record)
                        counts.add(record, labelled, image)
                        prints.add(labelled, image)
        except OSError as error:  # the output's fault, not the input's: fail the build, loudly
            raise BuildFailed(
                f"cannot write shard {name} to {self._output_dir}: {error}"
            ) from error
        self._written.inc(counts.num_examples)
        return counts.result(split, index, num_shards, name), rejections, prints.made()

    def _encode(self, labelled: LabelledEntry, data: bytes, vocabulary: Vocabulary):
        """(the framed record, the image as stored).

        An OSError from Pillow that `normalise_image` did not name is the image's fault too:
        `_write` takes every other OSError for the output's and fails the build.
        """
        try:
            image = normalise_image(data, self._policy)
        except OSError as error:
            raise InputError("corrupt_image", f"{type(error).__name__}: {error}") from None
        if image.reencoded:
            self._reencoded.inc()
        return encode_record(build_example(labelled, image, vocabulary)), image


class _ShardCounts:
    """What a shard's writer counts of the records it writes, for its `ShardResult`: bytes,
    SHA-256, examples, and what the build's metadata sums by split (class counts, label
    sources, folder disagreements, objects per image, widths, heights). A new count goes here
    and into `ShardResult` (then `stages/resume.py`'s record and `stages/finalize.py`)."""

    def __init__(self) -> None:
        self.digest, self.num_bytes, self.num_examples = hashlib.sha256(), 0, 0
        self.classes, self.sources, self.disagreements = (
            collections.Counter[int](),
            collections.Counter[str](),
            0,
        )
        self.objects, self.widths, self.heights = (collections.Counter[int]() for _ in range(3))

    def add(self, record: bytes, labelled: LabelledEntry, image: NormalisedImage) -> None:
        self.digest.update(record)
        self.num_bytes += len(record)
        self.num_examples += 1
        if labelled.label != UNLABELLED:
            self.classes[labelled.label] += 1
        self.sources[labelled.source] += 1
        self.disagreements += labelled.folder_disagrees
        self.objects[len(labelled.object_labels)] += 1
        self.widths[image.width] += 1
        self.heights[image.height] += 1

    def result(self, split: str, index: int, num_shards: int, name: str) -> ShardResult:
        return ShardResult(
            split=split,
            index=index,
            num_shards=num_shards,
            shard=ShardInfo(name, self.num_examples, self.num_bytes, self.digest.hexdigest()),
            class_counts=tuple(sorted(self.classes.items())),
            label_sources=tuple(sorted(self.sources.items())),
            folder_disagreements=self.disagreements,
            objects=tuple(sorted(self.objects.items())),
            widths=tuple(sorted(self.widths.items())),
            heights=tuple(sorted(self.heights.items())),
        )


def _kept_report(split: str, path: str, note: str) -> Rejection:
    """The `rejected.jsonl` line of an image written with a note (`--keep_stray_jpeg_bytes`):
    reported, not counted as rejected."""
    return Rejection(split, path, IMAGE, KEPT_STRAY_JPEG_BYTES, note, is_image=False)


class WriteShards(beam.PTransform):
    """Assigned entries → one TFRecord file per (split, shard); output (results, rejected,
    prints: a tuple of ImagePrint per shard)."""

    def __init__(
        self,
        input_dir: str,
        output_dir: str,
        policy: ImagePolicy,
        vocabulary,
        plans,
        resume=False,
        gate=None,
        staged=False,
        training=None,
    ):
        """`gate`, when given, is a singleton PCollection that must exist before any shard is
        written (a check that fails the build instead of producing it). `staged`: write the
        shards into the output's `.staged/`, beside the complete build they replace.
        `training`: a singleton TrainingCopies whose copies are not stored (drop_leaks)."""
        super().__init__()
        self._training = training
        self._resume = resume
        self._staged = staged
        self._gate = gate
        self._input_dir = input_dir
        self._output_dir = output_dir
        self._policy = policy
        self._vocabulary = vocabulary
        self._plans = plans

    def expand(self, assigned):
        result = (
            assigned
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                _WriteShardFn(
                    self._input_dir, self._output_dir, self._policy, self._resume, self._staged
                ),
                vocabulary=beam.pvalue.AsSingleton(self._vocabulary),
                plans=beam.pvalue.AsDict(self._plans),
                **({} if self._gate is None else {"gate": beam.pvalue.AsSingleton(self._gate)}),
                **(
                    {}
                    if self._training is None
                    else {"training": beam.pvalue.AsSingleton(self._training)}
                ),
            ).with_outputs(REJECTED, PRINTS, main="results")
        )
        return result.results, result[REJECTED], result[PRINTS]
