"""The file-level record reader: a split's shards as one input pipeline's serialised Examples.

file list and counts (from build_info.json, checked against the files) → the files of each
input pipeline (whole shards dealt evenly; of the shards left over, every n-th record) →
per-epoch file shuffle (training) → parallel interleave of `read_shard`. Like TFDS's
`core/reader.py`, it deals in files and counts only; `loaders.dataset` turns the records into
batches.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from loaders.config import AUTOTUNE, ReadConfig, tf_data_value
from loaders.info import BuildInfo, CorruptDatasetError
from schemas.paths import join

# Starts the stand-in for a record a shard failed to yield. A serialised Example never does:
# as a protobuf tag, "F" (0x46) is field 8 of wire type 6, which protobuf does not define.
_MISSING = "F"


@dataclasses.dataclass(frozen=True)
class SplitRecords:
    """What the record reader hands the examples step.

    Attributes:
      records: `(record, note)` pairs: a serialised `tf.train.Example` (a scalar `tf.string`),
        or `read_shard`'s stand-in for a lost one, which `checked_record` refuses; and the
        name of the record's shard, `["shard PATH"]`, which `checked_record` and the parser's
        errors give (`record_source`).
      num_examples: records per epoch in this input pipeline.
      fewest_examples: records per epoch in the input pipeline that has fewest (of all those
        of the `input_context`; `num_examples` without one): training takes as many batches
        from every pipeline, since each step takes one batch from each.
      num_bytes: the bytes of this input pipeline's records (what a cache of them holds).
    """

    records: tf.data.Dataset
    num_examples: int
    fewest_examples: int
    num_bytes: int = 0


def read_records(
    info: BuildInfo,
    split: str,
    *,
    training: bool = False,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
    config: ReadConfig = ReadConfig(),
) -> SplitRecords:
    """One input pipeline's records of a split, and how many it yields per epoch.

    With several input pipelines, each reads whole shards of its own, as many as every other
    one, dealt so that their counts come out even; the shards left over (fewer than the
    pipelines: all of them when there are fewer shards than pipelines) are read by every
    pipeline, which keeps every n-th record of each (from its own offset). So each record is
    read by one pipeline whatever order each walks its files in (its own shuffle, its own
    global seed), and the pipelines' counts differ by a record or two, not by whole shards (3
    pipelines on 4 shards read 2, 1 and 1 shards, and a training step takes a batch from
    each: a third of the epoch went unread). Training shuffles the files every epoch.

    Raises:
      KeyError: unknown split.
      CorruptDatasetError: a shard is missing or has another size than recorded.
    """
    check_shards(info, split)
    files = info.shard_paths(split)
    counts = [shard.num_examples for shard in info.split(split).shards]
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    index = input_context.input_pipeline_id if input_context else 0
    plans = _deal_shards(counts, num_pipelines)
    mine = plans[index]
    # The pipeline's files are picked here, not by `Dataset.shard` after the source: a tf.data
    # service in "distributed_epoch" mode hands the source's elements out among its workers,
    # and a `shard` after the source would then pick from each worker's part. Each file's
    # element says which of its records this pipeline keeps (every n-th, from an offset).
    dataset = tf.data.Dataset.from_tensor_slices(
        (
            [files[shard] for shard, _, _, _ in mine],
            tf.constant([counts[shard] for shard, _, _, _ in mine], tf.int64),
            tf.constant([every for _, every, _, _ in mine], tf.int64),
            tf.constant([offset for _, _, offset, _ in mine], tf.int64),
        )
    )
    if training:
        dataset = dataset.shuffle(len(mine), seed=seed, reshuffle_each_iteration=True)
    records = _interleave_shards(
        dataset,
        len(mine),
        guard_missing=not any(char in info.data_dir for char in "*?["),
        deterministic=True if seed is not None else None,
        config=config,
        before=_unchanged_build(info),
    )
    per_pipeline = [sum(kept for _, _, _, kept in plan) for plan in plans]
    shards = info.split(split).shards
    num_bytes = sum(shards[s].num_bytes * kept // max(counts[s], 1) for s, _, _, kept in mine)
    return SplitRecords(records, per_pipeline[index], min(per_pipeline), num_bytes)


def _deal_shards(counts: list[int], pipelines: int) -> list[list[tuple[int, int, int, int]]]:
    """Each input pipeline's (shard, every, offset, records kept) to read.

    The largest shards whole, dealt out and back (0, 1, 2, 2, 1, 0, ...); the few smallest
    left over (as many as the shards' count exceeds a multiple of the pipelines) read by all,
    each keeping every n-th record from its own offset, the offsets that keep one record more
    going to the pipelines that have fewest so far. So the pipelines' counts differ by at most
    a record or two. The pipeline with most comes first: tf.distribute reports the first
    pipeline's batch count as the steps, and a pipeline with fewer runs out early without
    loss, where one with more would keep its last batch unread.
    """
    order = sorted(range(len(counts)), key=lambda shard: (-counts[shard], shard))
    whole = len(counts) - len(counts) % pipelines
    plans: list[list[tuple[int, int, int, int]]] = [[] for _ in range(pipelines)]
    totals = [0] * pipelines
    for position, shard in enumerate(order[:whole]):
        lap, seat = divmod(position, pipelines)
        pipeline = seat if lap % 2 == 0 else pipelines - 1 - seat
        plans[pipeline].append((shard, 1, 0, counts[shard]))
        totals[pipeline] += counts[shard]
    for shard in order[whole:]:
        neediest = sorted(range(pipelines), key=lambda pipeline: (totals[pipeline], pipeline))
        for offset, pipeline in enumerate(neediest):  # offset 0 keeps most
            kept = len(range(offset, counts[shard], pipelines))
            plans[pipeline].append((shard, pipelines, offset, kept))
            totals[pipeline] += kept
    ranked = sorted(range(pipelines), key=lambda pipeline: (-totals[pipeline], pipeline))
    return [sorted(plans[pipeline]) for pipeline in ranked]


def _unchanged_build(info: BuildInfo) -> tf.data.Dataset | None:
    """A dataset of no element that fails unless the build's metadata file is still what
    `load_dataset` read; None where that cannot be told.

    `read_shard` walks it before it opens its shard and again after the shard's last record.
    A rebuild into the directory (`--overwrite`) writes shards of the same names: a dataset
    made before it read them, cut to the old counts, without a word; in the middle of an
    epoch, the shards opened after the rebuild's commit were the new build's (those open
    already keep the old files). A commit deletes the old metadata file before it touches a
    shard, so a shard opened after it fails one of its two checks: the first, or, where the
    interleave made the shard's dataset ahead of opening it, the last. Two reads of the
    metadata file per shard; none for a directory whose name holds glob characters, where
    `matching_files` cannot tell a missing file.
    """
    if not info.metadata_file or any(char in info.data_dir for char in "*?["):
        return None
    path = join(info.data_dir, info.metadata_file)
    gone = f"{path} is gone since load_dataset read it (a rebuild under way?): the shards may "
    changed = f"{path} changed since load_dataset read it (rebuilt, or upgraded): the shards may "
    fix = "not be those the dataset was made for; call load_dataset again once it is complete"

    def check(path):
        there = tf.debugging.Assert(tf.size(tf.io.matching_files(path)) > 0, [gone + fix])
        with tf.control_dependencies([there]):
            same = tf.io.read_file(path) == info.metadata_text
        unchanged = tf.debugging.Assert(same, [changed + fix])
        with tf.control_dependencies([unchanged]):
            return tf.identity(path)

    # The path is an element, not a constant of the function: TensorFlow folds a read of a
    # constant path into a constant once per iterator, so a check made so saw the metadata
    # of the epoch's start however often it ran.
    return tf.data.Dataset.from_tensors(path).map(check).filter(lambda _: False)


def _interleave_shards(
    files: tf.data.Dataset,
    num_files: int,
    *,
    guard_missing: bool,
    deterministic: bool | None,
    config: ReadConfig,
    before: tf.data.Dataset | None = None,
) -> tf.data.Dataset:
    """The records of `files`' `(path, expected count, every, offset)` elements (every n-th
    record of the file from an offset; 1 and 0 for all of them), several files at a time."""
    cycle_length = num_files if config.cycle_length == AUTOTUNE else config.cycle_length
    return files.interleave(
        lambda path, expected, every, offset: read_shard(
            path, expected, guard_missing, before
        ).shard(every, offset),
        cycle_length=max(1, min(cycle_length, num_files)),
        num_parallel_calls=tf_data_value(config.num_parallel_calls),
        deterministic=deterministic,
    )


def read_shard(
    path: tf.Tensor,
    expected: tf.Tensor,
    guard_missing: bool = True,
    before: tf.data.Dataset | None = None,
) -> tf.data.Dataset:
    """Exactly `expected` records of one shard; `checked_record` refuses stand-ins for lost ones.

    TensorFlow's own error for a corrupt record does not name the file. Here the reader skips
    unreadable frames (a checksum or a truncation) and the stream is padded up to the count in
    build_info.json with a stand-in holding an error message that names the shard, so
    `checked_record` fails with it instead of training on a silently shortened epoch. Only
    dataset ops run per record: counting with `scan`/`filter` functions, or zipping an index
    on, runs a function per record and slows reading markedly (see benchmarks/RESULTS.md). A
    file that vanished after `load_dataset` checked it fails before it is opened (skipping the
    reader's errors on a missing file would retry forever: checked as the shard opens, so
    only a deletion between the check and the open, microseconds apart, escapes it; a
    rebuild's commit deletes no shard whose name it reuses); `guard_missing` is off for
    directories whose names hold glob characters, where that check cannot be exact. `before`
    (a dataset of no element, a check) is walked before the shard is opened and again after
    its records.

    Each record comes with its shard's name, `["shard PATH"]` (a vector of one: the parse's
    `example_names`), which `checked_record` and the parser give in their errors for a record
    that is not an Example or whose content they refuse. Made once per shard and zipped on (a
    dataset op, no function per record: the loader's CPU per image did not measurably change).
    """
    stand_in = tf.strings.join(
        [
            _MISSING + "ewer than the ",
            tf.strings.as_string(expected),
            " records that build_info.json counts are readable in shard ",
            path,
            ": it is corrupt or truncated (python -m beam_pipeline verify on its build"
            " locates the damage)",
        ]
    )
    padding = tf.data.Dataset.from_tensors(stand_in).repeat()
    if guard_missing:
        # Opened by a function of the checked path: where the check fails, a reader that
        # asks again finds nothing left to open (after a check of its own, it would open).
        stream = tf.data.Dataset.from_tensors(path).map(_shard_there).flat_map(_read)
    else:
        stream = _read(path)
    records = stream.concatenate(padding).take(expected)
    if before is not None:
        records = before.concatenate(records).concatenate(before)
    note = tf.reshape("shard " + path, [1])
    return tf.data.Dataset.zip((records, tf.data.Dataset.from_tensors(note).repeat()))


def _read(path: tf.Tensor) -> tf.data.Dataset:
    return tf.data.TFRecordDataset(path).ignore_errors()


def _shard_there(path: tf.Tensor) -> tf.Tensor:
    """The path; fails, naming the shard, unless it is there. Run as the shard opens, not
    when its dataset is made (the interleave makes them ahead): an open that fails is
    retried forever (`ignore_errors`)."""
    found = tf.debugging.Assert(
        tf.size(tf.io.matching_files(path)) > 0,
        [tf.strings.join(["shard ", path, " is missing"])],
    )
    with tf.control_dependencies([found]):
        return tf.identity(path)


def record_source(note: tf.Tensor) -> tf.Tensor:
    """A record's note (`read_shard`'s, `["shard PATH"]`) as the vector of one name that the
    parse's `example_names` takes; a scalar note (a caller's own, for one record) too."""
    return note if note.shape.rank == 1 else tf.reshape(note, [1])


def checked_record(record: tf.Tensor, note: tf.Tensor) -> tf.Tensor:
    """The record; fails with the stand-in's message where `read_shard` put one, or, naming
    the record's shard (`note`, `read_shard`'s), where its first byte is not an Example's (its
    checksums intact: TensorFlow's parse error then held the record's bytes, and Python failed
    to decode them as text).

    An `Assert` on the first byte for each: a stand-in is its own message, and an `Assert`
    formats its data only where it fails, so nothing is built or copied per record (a
    `tf.cond` that formatted the message cost measurable CPU on every record).
    """
    first = tf.strings.substr(record, 0, 1)
    whole = tf.debugging.Assert(tf.not_equal(first, _MISSING), [record])
    with tf.control_dependencies([whole]):  # (a stand-in is said as one, not as no Example)
        valid = tf.debugging.Assert(first == _EXAMPLE, [note, _NOT_AN_EXAMPLE])
    with tf.control_dependencies([valid]):
        return tf.identity(record)


# A serialised tf.train.Example starts with its field 1 (`features`, length-delimited).
_EXAMPLE = "\n"
# What `checked_record` says of a record that is not one, after its shard's name.
_NOT_AN_EXAMPLE = (
    "holds a record that is not a tf.train.Example, its checksums intact (written over after "
    "the build?): python -m beam_pipeline verify on its build names the record"
)


def check_shards(info: BuildInfo, split: str) -> None:
    """Raises CorruptDatasetError, naming the file, when a shard is missing or has another size."""
    for path, shard in zip(info.shard_paths(split), info.split(split).shards, strict=True):
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            raise CorruptDatasetError(f"shard {path} is missing") from None
        if size != shard.num_bytes:
            raise CorruptDatasetError(
                f"shard {path} has {size} bytes, build_info.json says {shard.num_bytes} "
                "(truncated or replaced; python -m beam_pipeline verify checks every record)"
            )
