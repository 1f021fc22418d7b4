"""`load_dataset`: a split's shards as a batched, prefetched `tf.data.Dataset` for Keras.

Two steps, as in TFDS's `core/reader.py`: `loaders.reader.read_records` turns the files into one
input pipeline's records (file list, per-epoch file shuffle, sharding, parallel interleave,
count), then `batch_examples` turns records into batches: shuffle buffer (training) → parallel
parse + decode (+ fused random crop and flip when training) → batch → assert_cardinality →
prefetch. Everything after the file list runs in tf.data's C++ threads: no Python per batch.
"""

from __future__ import annotations

import os
import warnings

import tensorflow as tf

from loaders.config import ReadConfig, tf_data_value
from loaders.info import data_path, dataset_info
from loaders.preprocessing import (
    checked_image_size,
    eval_view,
    is_int,
    output_dtype,
    train_view,
    view_boxes,
)
from loaders.reader import SplitRecords, checked_record, read_records
from schemas import features as F
from schemas import one_hot_length, tf_feature_spec
from schemas.paths import is_local

# Keras's names ("categorical" is one-hot, None yields images only) and the loader's own.
LABEL_MODES = ("one_hot", "categorical", "int", "detection", None)
# KerasHub's names of the corner formats; "rel_" ones are fractions of the output image.
BOX_FORMATS = ("rel_yxyx", "yxyx", "rel_xyxy", "xyxy")


def load_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str | None = "one_hot",
    bounding_box_format: str = "rel_yxyx",
    max_boxes: int | None = None,
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
    `label_mode="int"`; `label_mode=None` yields images alone. `label_mode="detection"` yields
    `(images, {"boxes": float32 [B, N, 4], "classes": int32 [B, N]})`: every object of each
    image, padded with -1 to the batch's largest object count (or to `max_boxes`); the boxes
    follow the training crop (clipped; those that fall out are dropped) and flip. Training
    batches drop the remainder; evaluation keeps it. The dataset knows its length
    (`assert_cardinality`), so Keras shows `n/N` steps. With a seed, the order and the
    augmentation are deterministic.

    Args:
      data_dir: a committed build (local or gs://); a local path is made absolute here, so
        the shards read (by tf.data service workers too) are those of the build read now.
      split: e.g. "train" or "validation".
      batch_size: per input pipeline (per replica when `input_context` is given, use
        `input_context.get_per_replica_batch_size(global_batch_size)`).
      image_size: (height, width) of the output images, or one int for square ones.
      training: shuffle files and records, random crop and flip, drop the last partial batch.
      seed: makes shuffling and augmentation deterministic (with TensorFlow's global seed,
        which tf.data draws from too: the same pair gives the same epochs).
      label_mode: "one_hot" (or Keras's name, "categorical"), "int", "detection", or None
        (images only: the one mode for an unlabelled split such as `test`).
      bounding_box_format: detection's boxes, in KerasHub's names: "rel_yxyx" (fractions of
        the output image, [ymin, xmin, ymax, xmax]), "yxyx" (its pixels), "rel_xyxy", "xyxy".
      max_boxes: detection pads (and cuts: the first `max_boxes` objects in annotation order
        are kept) every image's objects to this fixed count; None pads to the batch's largest.
      dtype: "float32" (default) or "uint8".
      service: a tf.data service dispatcher ("grpc://host:port", `python -m loaders.service`):
        its workers read, parse and decode (each record once per epoch: the file list is split
        among them, "distributed_epoch"); this process only batches. They must see `data_dir`
        at the same path. The order then varies from run to run even with a seed.
      with_filenames: each element also carries the images' file names in the source tree
        (`tf.string [B]`, last): `(images, labels, filenames)`, or `(images, filenames)` with
        `label_mode=None`; detection puts them in its dict as "filename". For evaluation and
        error analysis: `fit` would read a third element as sample weights.
      input_context: from `tf.distribute`; each input pipeline reads its own files, as many
        as every other, and every n-th record of the shards left over (see
        `reader.read_records`); training takes as many batches from each. A context whose
        pipelines feed several replicas each gets a warning: Keras would count its steps
        wrong (see `checked_input_context`).
      config: the loader's knobs.

    Raises:
      IncompleteDatasetError: `data_dir` holds no committed build.
      CorruptDatasetError: a shard is missing or has another size than recorded.
      KeyError: unknown split.
      ValueError, TypeError: a bad argument (named), before any graph is built; a training
        split smaller than one batch; a labelled mode on an unlabelled split (label -1).
      ConnectionError: no tf.data service dispatcher answers at `service`.
      tf.errors.InvalidArgumentError (while iterating): a shard whose records are corrupt; the
        message names the file.
    """
    image_size, label_mode, dtype = checked_arguments(
        batch_size,
        image_size,
        label_mode,
        dtype,
        bounding_box_format,
        max_boxes,
        training=training,
        seed=seed,
        with_filenames=with_filenames,
        config=config,
    )
    checked_input_context(input_context)
    data_dir = data_path(data_dir)
    if is_local(data_dir):
        # The shards are opened later, maybe elsewhere: tf.data service workers run in their own
        # working directory, where a relative path names another build or nothing.
        data_dir = os.path.abspath(data_dir)
    info = dataset_info(data_dir)
    refuse_unlabelled(info, split, label_mode)
    records = read_records(
        info, split, training=training, seed=seed, input_context=input_context, config=config
    )
    refuse_empty_epoch(split, records.fewest_examples, batch_size, training)
    return batch_examples(
        records,
        info.num_classes,
        batch_size=batch_size,
        image_size=image_size,
        training=training,
        seed=seed,
        label_mode=label_mode,
        bounding_box_format=bounding_box_format,
        max_boxes=max_boxes,
        dtype=dtype,
        service=service,
        with_filenames=with_filenames,
        config=config,
    )


def refuse_unlabelled(info, split: str, label_mode: str | None) -> None:
    """ValueError when a labelled `label_mode` asks for an unlabelled split (label -1)."""
    if label_mode is not None and not info.split(split).labelled:
        raise ValueError(
            f"split {split!r} of {info.data_dir} is unlabelled (its tree has no annotations and "
            f"no class folders; every record has label -1): label_mode={label_mode!r} needs "
            "labels; label_mode=None loads its images"
        )


def checked_input_context(input_context) -> None:
    """TypeError, naming the argument, when `input_context` is not a `tf.distribute` one; a
    warning when each input pipeline feeds several replicas.

    `distribute_datasets_from_function` then takes that many of a pipeline's batches per step
    but reports the pipeline's batch count as the steps per epoch, and Keras trusts it: with 2
    replicas on one host, Keras showed 31 steps, ran 15 and warned "Your input ran out of
    data". No dataset can report the right count there; a custom training loop, or `fit` with
    `steps_per_epoch`, is right (TPUStrategy, several GPUs per host across hosts), so the
    form is not refused: the warning says the count to use, and the way to avoid it.
    """
    if input_context is None:
        return
    if not all(
        isinstance(getattr(input_context, name, None), int)
        for name in ("num_input_pipelines", "input_pipeline_id", "num_replicas_in_sync")
    ):
        raise TypeError(
            "input_context must be a tf.distribute.InputContext (the argument of the function "
            f"given to distribute_datasets_from_function) or None, not {input_context!r}"
        )
    replicas, pipelines = input_context.num_replicas_in_sync, input_context.num_input_pipelines
    if replicas > pipelines:
        per_step = replicas // pipelines
        warnings.warn(
            f"input_context has {pipelines} input pipeline(s) for {replicas} replicas: each "
            f"step takes {per_step} of this dataset's batches, but tf.distribute reports its "
            "batch count as the steps per epoch (Keras would show more steps than it runs and "
            f"warn that the input ran out of data): give fit steps_per_epoch=len(dataset) // "
            f"{per_step}, or give each replica its own pipeline with "
            "tf.distribute.InputOptions(experimental_replication_mode=tf.distribute."
            "InputReplicationMode.PER_REPLICA) (MirroredStrategy); a training loop that counts "
            "its own steps is right as it is",
            UserWarning,
            stacklevel=3,
        )


def refuse_empty_epoch(split: str, num_examples: int, batch_size: int, training: bool) -> None:
    """ValueError when training would have no batch: fewer examples than one batch."""
    if training and num_examples < batch_size:
        raise ValueError(
            f"batch_size={batch_size} is larger than split {split!r} "
            f"({num_examples} examples per input pipeline): training drops the last "
            "partial batch, so an epoch would have no batch at all; lower batch_size"
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
    bounding_box_format: str = "rel_yxyx",
    max_boxes: int | None = None,
    dtype: str = "float32",
    service: str | None = None,
    with_filenames: bool = False,
    config: ReadConfig = ReadConfig(),
) -> tf.data.Dataset:
    """The examples step: `(images, labels)` batches of the reader's records, as `load_dataset`.

    Training shuffles the records in a buffer and zips a random seed onto each for its crop and
    flip. The batch count comes from `records.num_examples`, so the dataset knows its length.
    """
    image_size, label_mode, dtype = checked_arguments(
        batch_size,
        image_size,
        label_mode,
        dtype,
        bounding_box_format,
        max_boxes,
        training=training,
        seed=seed,
        with_filenames=with_filenames,
        config=config,
    )
    dataset = records.records
    if training:
        dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        random = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip(dataset, random.batch(2))

    parse = _Parser(
        num_classes,
        image_size,
        training,
        label_mode,
        bounding_box_format,
        max_boxes,
        dtype,
        with_filenames,
        config,
    )
    dataset = dataset.map(
        parse,
        num_parallel_calls=tf_data_value(config.num_parallel_calls),
        deterministic=True if seed is not None else None,
    )
    if service is not None:
        # Imported here: `python -m loaders.service` runs that module as __main__, and an
        # import of it by `import loaders` would make runpy warn.
        from loaders.service import checked_service

        dataset = dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch", service=checked_service(service)
            )
        )
    if label_mode == "detection":
        # Objects per image vary: pad each batch's boxes and classes with -1.
        dataset = dataset.padded_batch(
            batch_size,
            padding_values=parse.padding_values(dataset.element_spec),
            drop_remainder=training,
        )
    else:
        dataset = dataset.batch(batch_size, drop_remainder=training)
    examples = records.num_examples
    batches = examples // batch_size if training else -(-examples // batch_size)
    if training and records.fewest_examples // batch_size < batches:
        # Each step takes a batch from every input pipeline: as many from each as the
        # pipeline with fewest has (its records differ by a few, see read_records).
        batches = records.fewest_examples // batch_size
        dataset = dataset.take(batches)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf_data_value(config.prefetch))


def checked_arguments(
    batch_size,
    image_size,
    label_mode,
    dtype,
    box_format,
    max_boxes,
    *,
    training=False,
    seed=None,
    with_filenames=False,
    config=ReadConfig(),
):
    """(image_size as (h, w), label_mode with "categorical" as "one_hot", dtype's name).

    Integer arguments may be Python or NumPy integers (not bools); boolean ones must be bools.

    Raises:
      TypeError, ValueError: naming the argument, before TensorFlow builds anything.
    """
    for name, value in (("training", training), ("with_filenames", with_filenames)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, not {value!r}")
    if seed is not None and not is_int(seed):
        raise TypeError(f"seed must be an int or None, not {seed!r}")
    if not isinstance(config, ReadConfig):
        raise TypeError(
            f"config must be a loaders.ReadConfig (ReadConfig(shuffle_buffer=...)), not {config!r}"
        )
    if not is_int(batch_size):
        raise TypeError(f"batch_size must be an int, not {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    size = checked_image_size(image_size)
    if label_mode not in LABEL_MODES:
        raise ValueError(f"label_mode must be one of {LABEL_MODES}, not {label_mode!r}")
    if box_format not in BOX_FORMATS:
        raise ValueError(f"bounding_box_format must be one of {BOX_FORMATS}, not {box_format!r}")
    if max_boxes is not None and not is_int(max_boxes):
        raise TypeError(f"max_boxes must be an int or None, not {max_boxes!r}")
    if max_boxes is not None and max_boxes < 1:
        raise ValueError(f"max_boxes must be at least 1, not {max_boxes}")
    if label_mode != "detection" and (box_format != "rel_yxyx" or max_boxes is not None):
        raise ValueError(
            "bounding_box_format and max_boxes shape detection's boxes: they need "
            f'label_mode="detection", not {label_mode!r}'
        )
    label_mode = "one_hot" if label_mode == "categorical" else label_mode
    return size, label_mode, output_dtype(dtype)


class _Parser:
    """One serialized record (with a seed when training) → one dataset element."""

    def __init__(
        self,
        num_classes,
        image_size,
        training,
        label_mode,
        box_format,
        max_boxes,
        dtype,
        with_filenames,
        config,
    ):
        self.num_classes = num_classes
        self.image_size = image_size
        self.training = training
        self.label_mode = label_mode
        self.box_format = box_format
        self.max_boxes = max_boxes
        self.dtype = dtype
        self.with_filenames = with_filenames
        self.config = config
        detection = label_mode == "detection"
        keys = (
            F.ENCODED,
            *((F.LABEL,) if label_mode in ("one_hot", "int") else ()),
            *(F.BOX_KEYS_YX if detection or (training and config.random_crop) else ()),
            *((F.OBJECT_LABEL,) if detection else ()),
            *((F.FILENAME,) if with_filenames else ()),
        )
        self.spec = tf_feature_spec(num_classes, keys)

    def __call__(self, record, seed=None):
        parsed = tf.io.parse_single_example(checked_record(record), self.spec)
        boxes = None
        if F.BBOX_YMIN in parsed:
            boxes = tf.stack([tf.sparse.to_dense(parsed[key]) for key in F.BOX_KEYS_YX], axis=1)
        if self.training:
            image, view = train_view(
                parsed[F.ENCODED], boxes, self.image_size, seed, self.config, self.dtype
            )
        else:
            image, view = eval_view(parsed[F.ENCODED], self.image_size, self.config, self.dtype)
        filenames = (parsed[F.FILENAME],) if self.with_filenames else ()
        if self.label_mode is None:
            return (image, *filenames) if filenames else image
        if self.label_mode == "detection":
            classes = tf.cast(tf.sparse.to_dense(parsed[F.OBJECT_LABEL]), tf.int32)
            target = self._objects(*view_boxes(boxes, classes, view))
            if filenames:
                target["filename"] = filenames[0]
            return image, target
        label = tf.cast(parsed[F.LABEL], tf.int32)
        if self.label_mode == "one_hot":
            label = tf.one_hot(label, one_hot_length(self.num_classes), dtype=tf.float32)
        return (image, label, *filenames)

    def _objects(self, boxes, classes):
        """{"boxes", "classes"} of one image in the chosen format, cut/padded to `max_boxes`."""
        if self.box_format in ("yxyx", "xyxy"):
            height, width = self.image_size
            boxes = boxes * tf.constant([height, width, height, width], tf.float32)
        if self.box_format in ("rel_xyxy", "xyxy"):
            boxes = tf.gather(boxes, [1, 0, 3, 2], axis=1)
        if self.max_boxes is not None:
            pad = tf.maximum(self.max_boxes - tf.shape(classes)[0], 0)
            boxes = tf.pad(boxes[: self.max_boxes], [[0, pad], [0, 0]], constant_values=-1.0)
            classes = tf.pad(classes[: self.max_boxes], [[0, pad]], constant_values=-1)
            boxes = tf.ensure_shape(boxes, [self.max_boxes, 4])
            classes = tf.ensure_shape(classes, [self.max_boxes])
        return {"boxes": boxes, "classes": classes}

    @staticmethod
    def padding_values(element_spec):
        """`padded_batch`'s padding: -1 for boxes and classes, 0 / "" for the rest."""
        image_spec, target_spec = element_spec
        pads = {
            key: tf.constant(-1, spec.dtype) if key in ("boxes", "classes") else tf.constant("")
            for key, spec in target_spec.items()
        }
        return tf.constant(0, image_spec.dtype), pads
