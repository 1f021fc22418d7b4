"""`load_dali_dataset`: a split's shards decoded by NVIDIA DALI, on the GPU when there is one.

    pip install ".[gpu]"          # nvidia-dali-cuda120; ".[gpu-cuda13]" for CUDA 13 drivers
    from loaders.dali import load_dali_dataset
    train = load_dali_dataset("out/", "train", batch_size=256, training=True, dtype="uint8")
    model.fit(train, epochs=90)   # model = keras.Sequential([normalization_layer(), ...])

What `load_dataset` does in tf.data's threads, DALI does here: `fn.readers.tfrecord` reads the
shards through an index per shard and, when training, shuffles them as `load_dataset` does
(the files in a new order every epoch, their records mixed in a buffer; the same order for the
same seed, another for another seed or none); images are decoded
by nvJPEG ("mixed": Huffman on the CPU, the rest on the GPU) and cropped, resized and flipped on
the GPU. Without a GPU the same pipeline runs on DALI's CPU backend. The batches reach Keras on
the device (DLPack, no copy through the host) with the JAX and PyTorch backends (from the CPU
backend, as NumPy arrays, which Keras moves to its device); with the
TensorFlow backend they come as a `tf.data.Dataset` of host arrays (DALI's TensorFlow plugin is
compiled against one TensorFlow build at install time, so this loader does not depend on it).

The policy is `load_dataset`'s: labels (and their `background` column), `class_names`, `dtype`
and `value_range`, every record once per epoch (training drops the last partial batch,
evaluation keeps it; the length is known), and the training crop keeps at least
`config.min_object_covered` of the main object (the largest box, of the label's class when
labels are loaded; the whole image when there is none), with an area of
`config.crop_area_range` of the image and an aspect ratio in
`config.crop_aspect_ratio_range`, drawn as `tf.image.sample_distorted_bounding_box` draws it
(`crop_windows`: the same distribution, not the same draws; the whole image when no attempt
fits).

Here: the entry point, which checks its arguments into a `LoadSpec` and a `DaliSettings`, and
the pipeline's batches as Keras takes them (`DaliDataset`, or a `tf.data.Dataset`). The
pipeline itself is `loaders.dali_graph`'s; the index files, and the check that the build is
unchanged since they were read, `loaders.dali_index`'s. Nothing here is imported by
`import loaders`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import keras
import numpy as np

from loaders.config import ReadConfig
from loaders.dali_graph import DaliSettings, dali_pipeline
from loaders.dali_index import epoch_check, shard_indexes
from loaders.info import BuildInfo, CorruptDatasetError, data_path, dataset_info, keras_habits
from loaders.reader import check_shards
from loaders.spec import LoadSpec

LABEL_MODES = ("one_hot", "categorical", "int", "binary", None)


@keras_habits
def load_dali_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str | None = "one_hot",
    background: bool | None = None,
    dtype: str = "float32",
    device: str = "auto",
    num_threads: int | None = None,
    index_dir: str | None = None,
    decoder_options: Mapping[str, object] | None = None,
    prefetch_batches: int | None = None,
    config: ReadConfig = ReadConfig(),
):
    """`(images [B, H, W, 3], labels)` batches of one split, decoded by DALI, for `model.fit`.

    The arguments mean what they mean for `loaders.load_dataset` (`loaders.spec.LoadSpec`; its
    `class_names` too); `label_mode` may not be "detection". `device`, `num_threads`,
    `decoder_options`, `prefetch_batches` are DALI's (`loaders.dali_graph.DaliSettings`).

    Args:
      data_dir: a committed build on a local file system (DALI reads local files).
      index_dir: where the per-shard index files DALI's reader needs are kept (written on
        first use, after every record's CRCs are checked; reused while the shards keep their
        size and build_info.json its SHA-256). Default: a directory per build under
        $XDG_CACHE_HOME (or ~/.cache)/imagenet-tfrecords/dali-index.

    Returns:
      With the JAX or PyTorch backend, a `keras.utils.PyDataset` (`DaliDataset`) whose batches
      are that backend's arrays on the GPU, or NumPy arrays from DALI's CPU backend (Keras
      moves them to its device); with the TensorFlow backend, a `tf.data.Dataset` of the same
      batches (host arrays), with its cardinality.

    Raises:
      IncompleteDatasetError, CorruptDatasetError, KeyError: as `load_dataset`; also
        CorruptDatasetError naming the shard, record and byte offset of a record whose CRC is
        wrong, when its shard's index is written (DALI's reader checks no CRCs).
      ValueError, TypeError: a bad argument, named; `device="gpu"` without a GPU; gs:// paths.
    """
    if label_mode not in LABEL_MODES:
        raise ValueError(
            f"label_mode must be one of {LABEL_MODES} with DALI, not {label_mode!r} "
            "(detection targets come from load_dataset)"
        )
    spec = LoadSpec.checked(
        batch_size=batch_size,
        image_size=image_size,
        training=training,
        seed=seed,
        label_mode=label_mode,
        background=background,
        dtype=dtype,
        config=config,
    )
    settings = DaliSettings.checked(device, num_threads, decoder_options, prefetch_batches)
    return dali_batches(_local_build(data_dir), split, spec, settings, index_dir)


def _local_build(data_dir: str) -> BuildInfo:
    """The build's metadata; ValueError for a gs:// path, which DALI cannot read."""
    data_dir = data_path(data_dir)
    if "://" in data_dir:
        raise ValueError(
            f"data_dir {data_dir!r}: DALI's reader reads local files only; copy the build to a "
            "local disk (or use load_dataset, which reads gs://)"
        )
    return dataset_info(data_dir)


def dali_batches(
    info: BuildInfo, split: str, spec: LoadSpec, settings: DaliSettings, index_dir: str | None
):
    """`load_dali_dataset`'s batches once its arguments are checked: the split checked
    against `spec`, its shards' indexes written if need be, DALI's pipeline built, and its
    batches handed over as the Keras backend takes them."""
    if spec.config.cache:
        raise ValueError(
            "ReadConfig(cache=True) is load_dataset's: DALI reads and decodes every epoch anew "
            "(on the GPU: the CPU's work a cache saves is not there to save)"
        )
    if spec.config.dct_scaling:
        raise ValueError(
            "ReadConfig(dct_scaling=True) is load_dataset's: DALI decodes every JPEG whole "
            "(nvJPEG has no DCT scaling); a model trained with it is evaluated and served "
            "through load_dataset and preprocess_for_eval with the same config"
        )
    spec.refuse_unlabelled(info, split)
    spec.refuse_unseeded_workers("load_dali_dataset")
    class_names = spec.label_names(info, split)
    check_shards(info, split)
    num_examples = info.split(split).num_examples
    spec.refuse_empty_epoch(split, num_examples)
    unchanged = epoch_check(info, split)  # the shards' stamps, taken before their indexes
    files = info.shard_paths(split)
    indexes = shard_indexes(info, split, index_dir)
    pipeline = dali_pipeline(spec, settings, files, indexes, len(class_names))
    tensorflow = keras.backend.backend() == "tensorflow"  # host arrays, in a tf.data.Dataset
    backend = "numpy" if tensorflow else None
    batches = DaliDataset(
        pipeline,
        num_examples,
        spec.batch_size,
        spec.training,
        backend,
        unchanged=unchanged,
        label_limit=None if spec.label_mode is None else len(class_names),
    )
    dataset = _tf_dataset(batches, spec, len(class_names)) if tensorflow else batches
    dataset.class_names = class_names  # as load_dataset's, and Keras's
    return dataset


def _tf_dataset(batches: DaliDataset, spec: LoadSpec, num_labels: int):
    """`batches` (host arrays) as a `tf.data.Dataset` with its cardinality, as the TensorFlow
    backend gets `load_dataset`'s."""
    import tensorflow as tf

    images = tf.TensorSpec((None, *spec.image_size, 3), tf.as_dtype(spec.dtype))
    shapes = {"one_hot": ((None, num_labels), tf.float32), "binary": ((None, 1), tf.float32)}
    labels = (
        ()
        if spec.label_mode is None
        else (tf.TensorSpec(*shapes.get(spec.label_mode, ((None,), tf.int32))),)
    )

    def epoch():
        batches.on_epoch_begin()
        for _ in range(len(batches)):
            yield batches.next_batch()

    dataset = tf.data.Dataset.from_generator(
        epoch, output_signature=(images, *labels) if labels else images
    )
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(1)


class DaliDataset(keras.utils.PyDataset):
    """A DALI pipeline's batches as a Keras `PyDataset`: `len()` batches per epoch.

    DALI's reader is a stream: it reshuffles the split at every epoch (training) and pads its last
    batch by repeating a record. This class counts the stream's batches, so an epoch is exactly
    DALI's epoch: evaluation cuts the padding off the last batch, training drops that batch (as
    `load_dataset` drops the remainder). Keras asks for each index once per epoch, in order or
    shuffled (`fit(shuffle=True)`); each call returns the epoch's next batch, whose records DALI
    already drew at random, so the index is only checked. Batches taken outside `fit` (a peek
    at `dataset[0]`) are part of DALI's current epoch: the next `fit` epoch starts at DALI's
    next one (the rest of the current one is read and dropped), so it holds every record once.
    """

    def __init__(
        self,
        pipeline,
        num_examples: int,
        batch_size: int,
        training: bool,
        backend: str | None = None,
        unchanged: Callable[..., None] | None = None,
        label_limit: int | None = None,
    ):
        super().__init__(workers=1, use_multiprocessing=False)
        self._pipeline = pipeline
        self._unchanged = unchanged  # raises when the build changed since it was read
        # The labels loaded: the pipeline's last output is then the records' own labels.
        self._label_limit = label_limit
        self._pipeline.build()
        self.num_examples = num_examples
        self.batch_size = batch_size
        self.training = training
        self._stream_batches = math.ceil(num_examples / batch_size)
        self._position = 0  # stream batches consumed in DALI's current epoch
        self._convert = _converter(backend or keras.backend.backend(), pipeline.device_id)

    def __len__(self) -> int:
        """Batches per epoch: the last partial one is dropped when training."""
        if self.training:
            return self.num_examples // self.batch_size
        return self._stream_batches

    @property
    def num_batches(self) -> int:
        return len(self)

    def __getitem__(self, index: int):
        """The epoch's next batch, as a tuple: (images, labels), or (images,) with
        `label_mode=None` (Keras's `PyDataset` takes no bare array)."""
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of an epoch of {len(self)}")
        batch = self.next_batch()
        return batch if isinstance(batch, tuple) else (batch,)

    def _run(self):
        """DALI's next batch, once the build is checked unchanged since it was read: a
        rebuild that committed in the middle of an epoch is a CorruptDatasetError (before,
        DALI's own parse error, or records it parsed from the new shards at old offsets)."""
        try:
            outputs = self._pipeline.run()
        except RuntimeError:
            if self._unchanged is not None:
                self._unchanged()  # names the change, when the build changed
            raise
        if self._unchanged is not None:
            self._unchanged(quick=True)
        return outputs

    def on_epoch_begin(self):
        """Keras starts an epoch: first finish DALI's current one if batches were taken."""
        if self._position == 0 or (self.training and self._position == len(self)):
            return
        while self._position < self._stream_batches:
            self._run()
            self._position += 1
        self._position = 0

    def next_batch(self):
        """The epoch's next batch as the backend's arrays (a tuple, or one array)."""
        if self.training and self._position == len(self):
            if self._position < self._stream_batches:
                self._run()  # the padded partial batch, dropped
            self._position = 0
        if self._position == 0 and self._unchanged is not None:
            self._unchanged()  # every epoch, as load_dataset's reader checks
        outputs = self._run()
        self._position += 1
        real = self.batch_size
        if self._position == self._stream_batches:
            real = self.num_examples - (self._stream_batches - 1) * self.batch_size
            if not self.training:
                self._position = 0
        if self._label_limit is not None:
            *outputs, labels = outputs
            _check_labels(np.array(labels.as_tensor())[:real], self._label_limit)
        arrays = tuple(self._convert(output)[:real] for output in outputs)
        return arrays if len(arrays) > 1 else arrays[0]


def _check_labels(labels: np.ndarray, limit: int) -> None:
    """CorruptDatasetError for a record's label outside the `limit` labels loaded, which
    DALI's one-hot and cast would have wrapped or clipped (`load_dataset` checks alike)."""
    outside = labels[(labels < 0) | (labels >= limit)]
    if outside.size:
        raise CorruptDatasetError(
            f"A record's label {int(outside.flat[0])} is not one of the {limit} labels loaded: "
            "the build's metadata and records disagree (python -m beam_pipeline verify names "
            "what)"
        )


def _converter(backend: str, device_id: int | None):
    """A DALI TensorList (one batch) → a dense array, copied out of DALI's buffers (DALI reuses
    them): on the GPU, the backend's array there; from the CPU backend, a NumPy array, which
    Keras moves to its own device (a JAX array on the CPU would be refused by a model whose
    weights are on a GPU)."""

    def dense(tensor_list):
        return tensor_list.as_tensor()

    if device_id is None:
        return lambda batch: np.array(dense(batch), copy=True)
    if backend == "jax":
        import jax.dlpack

        return lambda batch: jax.dlpack.from_dlpack(dense(batch)).copy()
    if backend == "torch":
        import torch

        return lambda batch: torch.from_dlpack(dense(batch)).clone()
    return lambda batch: np.array(dense(batch.as_cpu()), copy=True)
