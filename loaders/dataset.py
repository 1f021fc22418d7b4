"""`load_dataset`: a split's shards as a batched, prefetched `tf.data.Dataset` for Keras.

Two steps, as in TFDS's `core/reader.py`: `loaders.reader.read_records` turns the files into one
input pipeline's records (file list, per-epoch file shuffle, sharding, parallel interleave,
count), then `batch_examples` turns records into batches: shuffle buffer (training) → parallel
parse + decode (+ fused random crop and flip when training) → batch → assert_cardinality →
prefetch. Everything after the file list runs in tf.data's C++ threads: no Python per batch.
"""

from __future__ import annotations

import tensorflow as tf

from loaders.config import ReadConfig, tf_data_value
from loaders.info import dataset_info
from loaders.preprocessing import output_dtype, preprocess_for_eval, preprocess_for_train
from loaders.reader import SplitRecords, checked_record, read_records
from loaders.service import checked_service
from schemas import features as F
from schemas import one_hot_length, tf_feature_spec

# Keras's names ("categorical" is one-hot, None yields images only) and the loader's own.
LABEL_MODES = ("one_hot", "categorical", "int", None)
_BOX_KEYS = (F.BBOX_YMIN, F.BBOX_XMIN, F.BBOX_YMAX, F.BBOX_XMAX)


def load_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str | None = "one_hot",
    dtype: str = "float32",
    service: str | None = None,
    with_filenames: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    config: ReadConfig = ReadConfig(),
) -> tf.data.Dataset:
    """Returns `(images [B, H, W, 3], labels)` batches of one split.

    Images are float32 in `config.value_range`, or uint8 pixels with `dtype="uint8"`: a quarter
    of the bytes to the accelerator and no float conversion on the host; put
    `loaders.normalization_layer(config)` first in the model to get the float32 values there.

    Labels are float32 one-hot vectors of `num_classes + 1` entries, one per name in
    `dataset_info(...).class_names` (the background class last), or int32 class indices with
    `label_mode="int"`; `label_mode=None` yields images alone. Training batches drop the remainder;
    evaluation keeps it. The dataset knows its length (`assert_cardinality`), so Keras shows
    `n/N` steps. With a seed, the order and the augmentation are deterministic.

    Args:
      data_dir: a committed build (local or gs://).
      split: e.g. "train" or "validation".
      batch_size: per input pipeline (per replica when `input_context` is given, use
        `input_context.get_per_replica_batch_size(global_batch_size)`).
      image_size: (height, width) of the output images, or one int for square ones.
      training: shuffle files and records, random crop and flip, drop the last partial batch.
      seed: makes shuffling and augmentation deterministic.
      label_mode: "one_hot" (or Keras's name, "categorical"), "int", or None (images only:
        the one mode for an unlabelled split such as `test`).
      dtype: "float32" (default) or "uint8".
      service: a tf.data service dispatcher ("grpc://host:port", `python -m loaders.service`):
        its workers read, parse and decode (each record once per epoch: the file list is split
        among them, "distributed_epoch"); this process only batches. They must see `data_dir`
        at the same path. The order then varies from run to run even with a seed.
      with_filenames: each element also carries the images' file names in the source tree
        (`tf.string [B]`, last): `(images, labels, filenames)`, or `(images, filenames)` with
        `label_mode=None`. For evaluation and error analysis: `fit` would read a third element
        as sample weights.
      input_context: from `tf.distribute`; each input pipeline reads its own files, or every
        n-th record when there are fewer files than pipelines.
      config: the loader's knobs.

    Raises:
      IncompleteDatasetError: `data_dir` holds no committed build.
      CorruptDatasetError: a shard is missing or has another size than recorded.
      KeyError: unknown split.
      ValueError, TypeError: a bad argument (named), before any graph is built; a training
        split smaller than one batch; a labelled mode on an unlabelled split (label -1).
      tf.errors.InvalidArgumentError (while iterating): a shard whose records are corrupt; the
        message names the file.
    """
    image_size, label_mode, dtype = _checked_arguments(batch_size, image_size, label_mode, dtype)
    info = dataset_info(data_dir)
    if label_mode is not None and not info.split(split).labelled:
        raise ValueError(
            f"split {split!r} of {data_dir} is unlabelled (its tree has no annotations and no "
            f"class folders; every record has label -1): label_mode={label_mode!r} needs labels; "
            "label_mode=None loads its images"
        )
    records = read_records(
        info, split, training=training, seed=seed, input_context=input_context, config=config
    )
    if training and records.num_examples < batch_size:
        raise ValueError(
            f"batch_size={batch_size} is larger than split {split!r} "
            f"({records.num_examples} examples per input pipeline): training drops the last "
            "partial batch, so an epoch would have no batch at all; lower batch_size"
        )
    return batch_examples(
        records,
        info.num_classes,
        batch_size=batch_size,
        image_size=image_size,
        training=training,
        seed=seed,
        label_mode=label_mode,
        dtype=dtype,
        service=service,
        with_filenames=with_filenames,
        config=config,
    )


def batch_examples(
    records: SplitRecords,
    num_classes: int,
    *,
    batch_size: int,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str | None = "one_hot",
    dtype: str = "float32",
    service: str | None = None,
    with_filenames: bool = False,
    config: ReadConfig = ReadConfig(),
) -> tf.data.Dataset:
    """The examples step: `(images, labels)` batches of the reader's records, as `load_dataset`.

    Training shuffles the records in a buffer and zips a random seed onto each for its crop and
    flip. The batch count comes from `records.num_examples`, so the dataset knows its length.
    """
    image_size, label_mode, dtype = _checked_arguments(batch_size, image_size, label_mode, dtype)
    dataset = records.records
    if training:
        dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        random = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip(dataset, random.batch(2))

    parse = _parser(num_classes, image_size, training, label_mode, dtype, with_filenames, config)
    dataset = dataset.map(
        parse,
        num_parallel_calls=tf_data_value(config.num_parallel_calls),
        deterministic=True if seed is not None else None,
    )
    if service is not None:
        dataset = dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch", service=checked_service(service)
            )
        )
    dataset = dataset.batch(batch_size, drop_remainder=training)
    examples = records.num_examples
    batches = examples // batch_size if training else -(-examples // batch_size)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf_data_value(config.prefetch))


def _checked_arguments(batch_size, image_size, label_mode, dtype):
    """(image_size as (h, w), label_mode with "categorical" as "one_hot", dtype's name).

    Raises:
      TypeError, ValueError: naming the argument, before TensorFlow builds anything.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size must be an int, not {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or not all(isinstance(side, int) and not isinstance(side, bool) for side in size)
    ):
        raise TypeError(f"image_size must be an int or (height, width), not {image_size!r}")
    if min(size) < 1:
        raise ValueError(f"image_size must be positive, not {image_size!r}")
    if label_mode not in LABEL_MODES:
        raise ValueError(f"label_mode must be one of {LABEL_MODES}, not {label_mode!r}")
    label_mode = "one_hot" if label_mode == "categorical" else label_mode
    return tuple(size), label_mode, output_dtype(dtype)


def _parser(num_classes, image_size, training, label_mode, dtype, with_filenames, config):
    keys = (
        F.ENCODED,
        F.LABEL,
        *(_BOX_KEYS if training and config.random_crop else ()),
        *((F.FILENAME,) if with_filenames else ()),
    )
    spec = tf_feature_spec(num_classes, keys)

    def labels_of(parsed):
        label = tf.cast(parsed[F.LABEL], tf.int32)
        if label_mode == "int":
            return label
        return tf.one_hot(label, one_hot_length(num_classes), dtype=tf.float32)

    def labelled(image, parsed):
        element = (image,) if label_mode is None else (image, labels_of(parsed))
        if with_filenames:
            element += (parsed[F.FILENAME],)
        return element[0] if len(element) == 1 else element

    def parse_eval(record):
        parsed = tf.io.parse_single_example(checked_record(record), spec)
        image = preprocess_for_eval(parsed[F.ENCODED], image_size, config, dtype)
        return labelled(image, parsed)

    def parse_train(record, seed):
        parsed = tf.io.parse_single_example(checked_record(record), spec)
        if not config.random_crop:
            image = preprocess_for_eval(parsed[F.ENCODED], image_size, config, dtype)
            if config.random_flip:
                image = tf.image.stateless_random_flip_left_right(image, seed)
            return labelled(image, parsed)
        boxes = tf.stack([tf.sparse.to_dense(parsed[key]) for key in _BOX_KEYS], axis=1)
        image = preprocess_for_train(parsed[F.ENCODED], boxes, image_size, seed, config, dtype)
        return labelled(image, parsed)

    return parse_train if training else parse_eval
