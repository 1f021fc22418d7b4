"""`load_dataset`: a split's shards as a batched, prefetched `tf.data.Dataset` for Keras.

file list (from dataset_info.json) → per-epoch file shuffle (training) → shard per input
pipeline → parallel interleave of TFRecordDataset → shuffle buffer (training) → parallel
parse + decode (+ fused random crop and flip when training) → batch → assert_cardinality →
prefetch. Everything after the file list runs in tf.data's C++ threads: no Python per batch.
"""

from __future__ import annotations

import tensorflow as tf

from loaders.config import AUTOTUNE, ReadConfig
from loaders.info import CorruptDatasetError, Dataset, dataset_info
from loaders.preprocessing import preprocess_for_eval, preprocess_for_train
from schemas import features as F
from schemas import tf_feature_spec

LABEL_MODES = ("one_hot", "int")
_BOX_KEYS = (F.BBOX_YMIN, F.BBOX_XMIN, F.BBOX_YMAX, F.BBOX_XMAX)


def _tf_int(value: int) -> int:
    return tf.data.AUTOTUNE if value == AUTOTUNE else value


# Starts the stand-in for a record a shard failed to yield (a serialised Example never does).
_MISSING = "\x00"


def read_shard(path: tf.Tensor, expected: tf.Tensor, guard_missing: bool = True) -> tf.data.Dataset:
    """Exactly `expected` records of one shard; `checked_record` refuses stand-ins for lost ones.

    TensorFlow's own error for a corrupt record does not name the file. Here the reader skips
    unreadable frames (a checksum or a truncation) and the stream is padded up to the count in
    dataset_info.json with a stand-in holding an error message that names the shard, so
    `checked_record` fails with it instead of training on a silently shortened epoch. Only
    dataset ops run per record: counting with `scan`/`filter` functions, or zipping an index
    on, halved the reading rate. A file that vanished after `load_dataset` checked it fails
    before it is opened (skipping the reader's errors on a missing file would retry forever);
    `guard_missing` is off for directories whose names hold glob characters, where that check
    cannot be exact.
    """
    if guard_missing:
        found = tf.debugging.Assert(
            tf.size(tf.io.matching_files(path)) > 0,
            [tf.strings.join(["shard ", path, " is missing"])],
        )
        with tf.control_dependencies([found]):
            path = tf.identity(path)
    stand_in = tf.strings.join(
        [
            _MISSING,
            "corrupt or truncated shard ",
            path,
            ": fewer than its ",
            tf.strings.as_string(expected),
            " records are readable (python -m beam_pipeline.verify locates the damage)",
        ]
    )
    padding = tf.data.Dataset.from_tensors(stand_in).repeat()
    return tf.data.TFRecordDataset(path).ignore_errors().concatenate(padding).take(expected)


def checked_record(record: tf.Tensor) -> tf.Tensor:
    """The record; fails with the stand-in's message where `read_shard` put one.

    One `Assert` on the first byte: the message is the record itself, so nothing is built per
    record (a `tf.cond` that formatted the message cost ~20 us of CPU per record, ~1% of the
    loader's work at 224x224).
    """
    valid = tf.debugging.Assert(tf.strings.substr(record, 0, 1) != _MISSING, [record])
    with tf.control_dependencies([valid]):
        return tf.identity(record)


def check_shards(info: Dataset, split: str) -> None:
    """Raises CorruptDatasetError, naming the file, when a shard is missing or has another size."""
    for path, shard in zip(info.shard_paths(split), info.split(split).shards, strict=True):
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            raise CorruptDatasetError(f"shard {path} is missing") from None
        if size != shard.num_bytes:
            raise CorruptDatasetError(
                f"shard {path} has {size} bytes, dataset_info.json says {shard.num_bytes} "
                "(truncated or replaced; python -m beam_pipeline.verify checks every record)"
            )


def _per_pipeline_count(counts: list[int], num_pipelines: int, index: int, by_file: bool) -> int:
    """Examples one input pipeline sees: its files' counts, or every num-th element."""
    if num_pipelines == 1:
        return sum(counts)
    if by_file:
        return sum(counts[index::num_pipelines])
    return (sum(counts) - index + num_pipelines - 1) // num_pipelines


def load_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    image_size: tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str = "one_hot",
    input_context: tf.distribute.InputContext | None = None,
    config: ReadConfig = ReadConfig(),
) -> tf.data.Dataset:
    """Returns `(images float32 [B, H, W, 3], labels)` batches of one split.

    Labels are float32 one-hot vectors of `num_classes + 1` entries (background last), or int32
    class indices with `label_mode="int"`. Training batches drop the remainder; evaluation keeps
    it. The dataset knows its length (`assert_cardinality`), so Keras shows `n/N` steps. With a
    seed, the order and the augmentation are deterministic.

    Args:
      data_dir: a committed build (local or gs://).
      split: e.g. "train" or "validation".
      batch_size: per input pipeline (per replica when `input_context` is given, use
        `input_context.get_per_replica_batch_size(global_batch_size)`).
      image_size: (height, width) of the output images.
      training: shuffle files and records, random crop and flip, drop the last partial batch.
      seed: makes shuffling and augmentation deterministic.
      label_mode: "one_hot" or "int".
      input_context: from `tf.distribute`; each input pipeline reads its own files, or every
        n-th record when there are fewer files than pipelines.
      config: the loader's knobs.

    Raises:
      IncompleteDatasetError: `data_dir` holds no committed build.
      CorruptDatasetError: a shard is missing or has another size than recorded.
      KeyError: unknown split.
      tf.errors.InvalidArgumentError (while iterating): a shard whose records are corrupt; the
        message names the file.
    """
    if label_mode not in LABEL_MODES:
        raise ValueError(f"label_mode must be one of {LABEL_MODES}, not {label_mode!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    info = dataset_info(data_dir)
    check_shards(info, split)
    files = info.shard_paths(split)
    counts = [shard.num_examples for shard in info.split(split).shards]
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    index = input_context.input_pipeline_id if input_context else 0
    by_file = len(files) >= num_pipelines

    dataset = tf.data.Dataset.from_tensor_slices((files, tf.constant(counts, tf.int64)))
    if num_pipelines > 1 and by_file:
        dataset = dataset.shard(num_pipelines, index)
    if training:
        # Element sharding needs every pipeline to walk the files in the same order.
        file_seed = seed if seed is not None or by_file else 0
        dataset = dataset.shuffle(len(files), seed=file_seed, reshuffle_each_iteration=True)
    cycle_length = len(files) if config.cycle_length == AUTOTUNE else config.cycle_length
    guard_missing = not any(char in data_dir for char in "*?[")
    dataset = dataset.interleave(
        lambda path, expected: read_shard(path, expected, guard_missing),
        cycle_length=max(1, min(cycle_length, len(files))),
        num_parallel_calls=_tf_int(config.num_parallel_calls),
        deterministic=True if seed is not None or not by_file else None,
    )
    if num_pipelines > 1 and not by_file:
        dataset = dataset.shard(num_pipelines, index)
    if training:
        dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        random = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip(dataset, random.batch(2))

    parse = _parser(info.num_classes, image_size, training, label_mode, config)
    dataset = dataset.map(
        parse,
        num_parallel_calls=_tf_int(config.num_parallel_calls),
        deterministic=True if seed is not None else None,
    )
    dataset = dataset.batch(batch_size, drop_remainder=training)
    examples = _per_pipeline_count(counts, num_pipelines, index, by_file)
    batches = examples // batch_size if training else -(-examples // batch_size)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(_tf_int(config.prefetch))


def _parser(num_classes, image_size, training, label_mode, config):
    keys = (F.ENCODED, F.LABEL, *(_BOX_KEYS if training and config.random_crop else ()))
    spec = tf_feature_spec(num_classes, keys)

    def labels_of(parsed):
        label = tf.cast(parsed[F.LABEL], tf.int32)
        if label_mode == "int":
            return label
        return tf.one_hot(label, num_classes + 1, dtype=tf.float32)

    def parse_eval(record):
        parsed = tf.io.parse_single_example(checked_record(record), spec)
        return preprocess_for_eval(parsed[F.ENCODED], image_size, config), labels_of(parsed)

    def parse_train(record, seed):
        parsed = tf.io.parse_single_example(checked_record(record), spec)
        if not config.random_crop:
            image = preprocess_for_eval(parsed[F.ENCODED], image_size, config)
            if config.random_flip:
                image = tf.image.stateless_random_flip_left_right(image, seed)
            return image, labels_of(parsed)
        boxes = tf.stack([tf.sparse.to_dense(parsed[key]) for key in _BOX_KEYS], axis=1)
        image = preprocess_for_train(parsed[F.ENCODED], boxes, image_size, seed, config)
        return image, labels_of(parsed)

    return parse_train if training else parse_eval
