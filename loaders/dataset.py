"""`load_dataset`: a split's shards as a batched, prefetched `tf.data.Dataset` for Keras.

Two steps, as in TFDS's `core/reader.py`: `loaders.reader.read_records` turns the files into one
input pipeline's records (file list, per-epoch file shuffle, sharding, parallel interleave,
count), then `batch_examples` turns records into batches: shuffle buffer (training) → parallel
parse + decode (+ fused random crop and flip when training) → batch → assert_cardinality →
prefetch. Everything after the file list runs in tf.data's C++ threads: no Python per batch.
`load_dataset` checks its arguments into one `loaders.spec.LoadSpec`, which the examples step
takes whole (the reader takes its `training`, `seed` and `config`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import warnings
import weakref

import tensorflow as tf

from loaders.config import ReadConfig, tf_data_value
from loaders.info import data_path, dataset_info, keras_habits
from loaders.jpeg_scale import may_scale, scaling_hint
from loaders.parser import RecordParser
from loaders.reader import SplitRecords, read_records
from loaders.spec import SEEDS, LoadSpec
from schemas import DEAD_LETTER_FILE
from schemas.paths import is_local


@keras_habits
def load_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str | None = "one_hot",
    background: bool | None = None,
    bounding_box_format: str = "rel_yxyx",
    max_boxes: int | None = None,
    difficult: str = "keep",
    dtype: str = "float32",
    service: str | None = None,
    with_filenames: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    config: ReadConfig = ReadConfig(),
) -> tf.data.Dataset:
    """Returns `(images [B, H, W, 3], labels)` batches of one split: float32 images in
    `config.value_range` (or uint8 pixels), one-hot labels (or int, detection targets, none).
    Training drops the last partial batch. The dataset knows its length (Keras shows `n/N`
    steps) and its `class_names`. Other arguments: `LoadSpec`'s fields.

    Args:
      data_dir: a committed build (local or gs://; a local path is made absolute here).
      split: e.g. "train" or "validation".
      service: a tf.data service dispatcher ("grpc://host:port", `python -m loaders.service`):
        its workers read, parse and decode (each record once per epoch: "distributed_epoch");
        this process only batches. They must see `data_dir` at the same path. The order then
        varies from run to run even with a seed.
      input_context: from `tf.distribute`; each input pipeline reads its own files, as many
        as every other (see `reader.read_records`); training takes as many batches from each.
        Pipelines that feed several replicas each get a warning (`checked_input_context`).

    Raises:
      IncompleteDatasetError: `data_dir` holds no committed build.
      CorruptDatasetError: a shard is missing or has another size than recorded.
      KeyError: unknown split.
      ValueError, TypeError: a bad argument (named), before any graph is built; a training split
        smaller than one batch; labels of an unlabelled split; background=False on negatives.
      ConnectionError: no tf.data service dispatcher answers at `service`.
      tf.errors.InvalidArgumentError (while iterating): a corrupt shard, a refused record's (named).
    """
    spec = LoadSpec.checked(
        batch_size=batch_size,
        image_size=image_size,
        training=training,
        seed=seed,
        label_mode=label_mode,
        background=background,
        bounding_box_format=bounding_box_format,
        max_boxes=max_boxes,
        difficult=difficult,
        dtype=dtype,
        with_filenames=with_filenames,
        config=config,
    )
    checked_input_context(input_context)
    return read_and_batch(data_dir, split, spec, service=service, input_context=input_context)


def read_and_batch(
    data_dir: str,
    split: str,
    spec: LoadSpec,
    *,
    service: str | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """`load_dataset`'s work once its arguments are checked: the build's metadata, the
    reader's records of one input pipeline, and their batches, with their `class_names`."""
    data_dir = data_path(data_dir)
    if is_local(data_dir):
        # The shards are opened later, maybe elsewhere: tf.data service workers run in their own
        # working directory, where a relative path names another build or nothing.
        data_dir = os.path.abspath(data_dir)
    info = dataset_info(data_dir)
    if not info.num_examples(split):  # (a build that committed an empty split: 0 batches)
        raise ValueError(
            f"split {split!r} of {data_dir} holds no image ({info.split(split).num_rejected} "
            f"rejected when it was built: {DEAD_LETTER_FILE} names them), so an epoch would "
            "have no batch"
        )
    spec.refuse_unlabelled(info, split)
    if input_context is None:
        spec.refuse_unseeded_workers("load_dataset")
    spec = dataclasses.replace(spec, seed=pipeline_seed(spec.seed, input_context))
    if spec.config.dct_scaling and not may_scale(info.split(split), spec.image_size):
        # No image of the split is twice the output: the same pixels without the choice,
        # which costs a training image 2-6% (benchmarks/RESULTS.md, "Loader: decoding at a
        # DCT scale").
        spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, dct_scaling=False))
    elif not spec.config.dct_scaling:
        _hint_scaling(info.split(split), spec.image_size, data_dir, split)
    class_names = spec.label_names(info, split)
    records = read_records(
        info,
        split,
        training=spec.training,
        seed=spec.seed,
        input_context=input_context,
        config=spec.config,
    )
    spec.refuse_empty_epoch(split, records.fewest_examples)
    dataset = batch_examples(
        records, info.num_classes, spec, num_labels=len(class_names), service=service
    )
    dataset.class_names = class_names  # as Keras's image_dataset_from_directory sets them
    if spec.training:
        _warn_on_cache(dataset)
    return dataset


# (build, split, output size) already hinted at in this process: a notebook that loads a split
# again, or a script that loads train and validation each epoch, is told once.
_HINTED: set[tuple[str, str, tuple[int, int]]] = set()


def _hint_scaling(split_info, image_size: tuple[int, int], data_dir: str, split: str) -> None:
    """Warns, once per build, split and output size in a process, where a split's images are
    far larger than the output and decoded whole."""
    hint = scaling_hint(split_info, image_size)
    if hint and (data_dir, split, image_size) not in _HINTED:
        _HINTED.add((data_dir, split, image_size))
        warnings.warn(f"split {split!r} of {data_dir}: {hint}", UserWarning, stacklevel=5)


def _warn_on_cache(dataset: tf.data.Dataset) -> None:
    """Gives a training dataset a `cache` that warns: Keras's tutorials cache the dataset
    (`ds.cache().shuffle(1000)`), whose augmentation is in the model; here the crops and flips
    are in the dataset, and a cache of it replays the first epoch's every epoch."""
    replay, this = type(dataset).cache, weakref.ref(dataset)  # (no cycle keeping it alive)

    @functools.wraps(replay)
    def cache(*args, **kwargs):
        warnings.warn(
            "cache() on load_dataset's training dataset replays the first epoch's random crops "
            "and flips every epoch; the loader keeps the records in memory itself and draws "
            "new ones each epoch (ReadConfig(cache=True); the default for splits up to 256 "
            "MiB): drop the .cache()",
            UserWarning,
            stacklevel=2,
        )
        return replay(this(), *args, **kwargs)

    dataset.cache = cache


def pipeline_seed(seed: int | None, input_context) -> int | None:
    """The seed of one input pipeline: `seed` for the first (or only) one, and one of its own,
    derived from `seed` and its id, for each other. With one seed for all, the replicas'
    shuffles and augmentation drew alike: the j-th image of every replica's batch got the
    same crop and flip (found by a loader review)."""
    if seed is None or input_context is None or input_context.input_pipeline_id == 0:
        return seed
    mixed = hashlib.sha256(f"{seed}/{input_context.input_pipeline_id}".encode()).digest()
    return int.from_bytes(mixed[:4], "big") % SEEDS


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


def batch_examples(
    records: SplitRecords,
    num_classes: int,
    spec: LoadSpec,
    *,
    num_labels: int,
    service: str | None = None,
) -> tf.data.Dataset:
    """The examples step: `(images, labels)` batches of the reader's records, as `load_dataset`
    (`num_labels`: the one-hot width, `len(spec.label_names(info, split))`; `service`: its
    tf.data service dispatcher, whose workers parse and decode).

    Training shuffles the records in a buffer and zips a random seed onto each for its crop and
    flip. The batch count comes from `records.num_examples`, so the dataset knows its length.
    """
    cached = spec.caches(records.num_examples, records.num_bytes, service)
    dataset = records.records
    if spec.training:
        buffer = spec.config.shuffle_buffer
        if cached:  # the records, kept from the first epoch; all in memory: a full reshuffle
            dataset = dataset.cache()
            buffer = max(buffer, records.num_examples)
        dataset = dataset.shuffle(buffer, seed=spec.seed, reshuffle_each_iteration=True)
        random = tf.data.Dataset.random(seed=spec.seed, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip(dataset, random.batch(2))
    parse = RecordParser(num_classes, num_labels, spec)
    dataset = dataset.map(
        parse.seeded if spec.training else parse,
        num_parallel_calls=tf_data_value(spec.config.num_parallel_calls),
        deterministic=True if spec.seed is not None else None,
    )
    if cached and not spec.training:  # evaluation's decoded images: the same every epoch
        dataset = dataset.cache()
    if service is not None:
        # Imported here: `python -m loaders.service` runs that module as __main__, and an
        # import of it by `import loaders` would make runpy warn.
        from loaders.service import checked_service

        dataset = dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch", service=checked_service(service)
            )
        )
    if spec.label_mode == "detection":
        # Objects per image vary: pad each batch's boxes and classes with -1.
        dataset = dataset.padded_batch(
            spec.batch_size,
            padding_values=parse.padding_values(dataset.element_spec),
            drop_remainder=spec.training,
        )
    else:
        dataset = dataset.batch(spec.batch_size, drop_remainder=spec.training)
    return _counted(dataset, records, spec)


def _counted(dataset: tf.data.Dataset, records: SplitRecords, spec: LoadSpec) -> tf.data.Dataset:
    """The batches with their count asserted (and cut to it when training), prefetched."""
    examples, batch_size = records.num_examples, spec.batch_size
    batches = examples // batch_size if spec.training else -(-examples // batch_size)
    if spec.training and records.fewest_examples // batch_size < batches:
        # Each step takes a batch from every input pipeline: as many from each as the
        # pipeline with fewest has (its records differ by a few, see read_records).
        batches = records.fewest_examples // batch_size
        dataset = dataset.take(batches)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    # Under tf.distribute without an input_context, shard by data, not by files: by files, a
    # MirroredStrategy split an evaluation's last batch of 16 as 16 and 0 between 2 replicas,
    # and Keras failed on the empty one ("Matrix size-incompatible"); by data, 8 and 8.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.prefetch(tf_data_value(spec.config.prefetch)).with_options(options)
