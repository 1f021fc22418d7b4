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

The policy is `load_dataset`'s: labels, `class_names`, `dtype` and `value_range`, every record
once per epoch (training drops the last partial batch, evaluation keeps it; the length is
known), and the training crop keeps at least `config.min_object_covered` of the main object
(the largest box; the whole image when there is none), with an area of `config.crop_area_range`
of the image and an aspect ratio in `config.crop_aspect_ratio_range`, drawn as
`tf.image.sample_distorted_bounding_box` draws it (`crop_windows`: the same distribution, not
the same draws; the whole image when no attempt fits). Nothing here is imported by
`import loaders`.
"""

from __future__ import annotations

import functools
import math
import os
import random
from collections.abc import Callable, Mapping

import keras
import numpy as np

from loaders.config import ReadConfig
from loaders.crops import central_windows, crop_windows
from loaders.dali_index import _file_stamp, shard_indexes
from loaders.info import BuildInfo, CorruptDatasetError, data_path, dataset_info
from schemas import features as F
from schemas import one_hot_length

try:
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import backend as dali_backend
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali import math as dmath
except ImportError as error:  # pragma: no cover - the message is what matters
    raise ImportError(
        "loaders.dali needs NVIDIA DALI: pip install '.[gpu]' (CUDA 12 drivers) or "
        "'.[gpu-cuda13]' (CUDA 13); load_dataset needs no extra"
    ) from error

LABEL_MODES = ("one_hot", "categorical", "int", None)
# On the GPU: batches prepared ahead, and the share of images for the hardware JPEG decoder.
# Measured on an H200 feeding ResNet-50 (batch 256, bfloat16; benchmarks/RESULTS.md, session
# 20): DALI's defaults (2 batches, hw_decoder_load 0.65) fed it at 0.81-0.82 of its speed on
# a cached batch, although DALI alone supplied 2.4x its rate; 16 batches and every image to
# the CUDA decoder fed it at 0.98 (one run; 8 batches: 0.95, twice). On an H100 (session 21)
# these defaults fed it at 0.98, 1.00 and 0.99 (three runs), DALI's own at 0.82-0.84.
GPU_PREFETCH_BATCHES = 16
GPU_HW_DECODER_LOAD = 0.0
MAX_PREFETCH = 64
DEVICES = ("auto", "gpu", "cpu")
READER = "reader"  # the TFRecord reader's name, for DALI's iterators


def load_dali_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool = False,
    seed: int | None = None,
    label_mode: str | None = "one_hot",
    dtype: str = "float32",
    device: str = "auto",
    num_threads: int | None = None,
    index_dir: str | None = None,
    decoder_options: Mapping[str, object] | None = None,
    prefetch_batches: int | None = None,
    config: ReadConfig = ReadConfig(),
):
    """`(images [B, H, W, 3], labels)` batches of one split, decoded by DALI, for `model.fit`.

    The arguments mean what they mean for `loaders.load_dataset` (one-hot labels of
    `num_classes + 1` entries with the background last, or int32 classes, or images alone;
    float32 in `config.value_range` or uint8 pixels for a model that starts with
    `normalization_layer(config)`).

    Args:
      data_dir: a committed build on a local file system (DALI reads local files).
      device: "gpu" (device 0; nvJPEG decoding, batches on the GPU), "cpu" (DALI's CPU
        backend), or "auto": the GPU when DALI sees one.
      num_threads: DALI's CPU threads (default: the cores this process may use).
      index_dir: where the per-shard index files DALI's reader needs are kept (written on
        first use, after every record's CRCs are checked; reused while the shards keep their
        size and build_info.json its SHA-256). Default: a directory per build under
        $XDG_CACHE_HOME (or ~/.cache)/imagenet-tfrecords/dali-index.
      decoder_options: more arguments for DALI's JPEG decoder (`fn.decoders.image`, and
        `image_slice` for training crops and evaluation central crops); DALI refuses a name it
        does not know. On the GPU the loader sets `hw_decoder_load` to 0 (every image decoded
        by CUDA kernels, none by the A100's, H100's or H200's hardware JPEG decoder: the model
        was fed faster so, see the README); `{"hw_decoder_load": 0.65}` is DALI's own default.
        The loader's own (`device`, `output_type`, `adjust_orientation`, the crop window's
        `axis_names`, `normalized_anchor`, `normalized_shape`, and `dtype`) are refused.
      prefetch_batches: how many batches DALI prepares ahead of the one being used (its
        `prefetch_queue_depth`, at least 1). Default: 16 on the GPU, where the model's own
        kernels delay DALI's and a deep queue absorbs that (its memory: 16 batches of decoded
        images and their outputs, up to ~3 GB for batches of 256 ImageNet-sized images, an
        estimate), 2 on the CPU backend.

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
    from loaders.dataset import checked_arguments, refuse_empty_epoch, refuse_unlabelled
    from loaders.preprocessing import is_int
    from loaders.reader import check_shards

    if label_mode not in LABEL_MODES:
        raise ValueError(
            f"label_mode must be one of {LABEL_MODES} with DALI, not {label_mode!r} "
            "(detection targets come from load_dataset)"
        )
    image_size, label_mode, dtype = checked_arguments(
        batch_size,
        image_size,
        label_mode,
        dtype,
        "rel_yxyx",
        None,
        training=training,
        seed=seed,
        config=config,
    )
    decoder_options = _checked_decoder_options(decoder_options)
    cores = len(os.sched_getaffinity(0))
    for name, value, default, most, why in (
        ("num_threads", num_threads, "the cores this process may use", max(64, 4 * cores),
         f"max(64, 4 x the {cores} cores)"),
        ("prefetch_batches", prefetch_batches, "16 on the GPU, 2 on the CPU", MAX_PREFETCH,
         "each batch ahead holds its decoded images"),
    ):  # fmt: skip
        if value is not None and not is_int(value):
            raise TypeError(f"{name} must be an int or None, not {value!r}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1 (or None: {default}), not {value}")
        if value is not None and value > most:
            # DALI aborted the process past its thread limit, and spun for minutes filling a
            # queue of a million batches.
            raise ValueError(f"{name} must be at most {most} ({why}), not {value}")
    batch_size = int(batch_size)
    device_id = _device_id(device)
    prefetch_batches = prefetch_depth(device_id, prefetch_batches)
    data_dir = data_path(data_dir)
    if "://" in data_dir:
        raise ValueError(
            f"data_dir {data_dir!r}: DALI's reader reads local files only; copy the build to a "
            "local disk (or use load_dataset, which reads gs://)"
        )
    info = dataset_info(data_dir)
    refuse_unlabelled(info, split, label_mode)
    check_shards(info, split)
    num_examples = info.split(split).num_examples
    refuse_empty_epoch(split, num_examples, batch_size, training)
    unchanged = _epoch_check(info, split)  # the shards' stamps, taken before their indexes
    pipeline = dali_pipeline(
        files=info.shard_paths(split),
        indexes=shard_indexes(info, split, index_dir),
        batch_size=batch_size,
        num_threads=cores if num_threads is None else int(num_threads),
        device_id=device_id,
        seed=seed,
        image_size=image_size,
        training=training,
        label_mode=label_mode,
        num_classes=info.num_classes,
        dtype=dtype,
        config=config,
        decoder_options=decoder_options,
        prefetch_batches=prefetch_batches,
    )
    if keras.backend.backend() != "tensorflow":
        return DaliDataset(pipeline, num_examples, batch_size, training, unchanged=unchanged)
    import tensorflow as tf

    batches = DaliDataset(
        pipeline, num_examples, batch_size, training, backend="numpy", unchanged=unchanged
    )
    images = tf.TensorSpec((None, *image_size, 3), tf.as_dtype(dtype))
    labels = (
        ()
        if label_mode is None
        else (tf.TensorSpec((None, one_hot_length(info.num_classes)), tf.float32),)
        if label_mode == "one_hot"
        else (tf.TensorSpec((None,), tf.int32),)
    )

    def epoch():
        batches.on_epoch_begin()
        for _ in range(len(batches)):
            yield batches.next_batch()

    dataset = tf.data.Dataset.from_generator(
        epoch, output_signature=(images, *labels) if labels else images
    )
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(1)


def _epoch_check(info: BuildInfo, split: str) -> Callable[..., None]:
    """What each epoch runs first: CorruptDatasetError when the build's metadata file is gone
    or changed since `load_dali_dataset` read it (a rebuild writes shards of the same names,
    which DALI would read through the old indexes), or when a shard file changed since its
    records were checked (DALI's reader checks no CRC). `check(quick=True)`, after every
    batch, looks at the metadata file's size and time alone, and checks the rest when they
    changed: a rebuild that commits in the middle of an epoch (DALI opens each shard when it
    reaches it, and would read a new one through its old index)."""
    fix = "call load_dali_dataset again once the build is complete"
    path = os.path.join(info.data_dir, info.metadata_file) if info.metadata_file else None
    stamps = {shard: _file_stamp(shard) for shard in info.shard_paths(split)}
    metadata_stamp = _file_stamp(path) if path is not None else None

    def check(quick: bool = False) -> None:
        if quick:
            try:
                if path is None or _file_stamp(path) == metadata_stamp:
                    return
            except FileNotFoundError:
                pass  # the full check says so
        if path is not None:
            try:
                with open(path, "rb") as file:
                    text = file.read().decode("utf-8", errors="replace")
            except FileNotFoundError:
                raise CorruptDatasetError(
                    f"{path} is gone since load_dali_dataset read it (a rebuild under way?): {fix}"
                ) from None
            if text != info.metadata_text:
                raise CorruptDatasetError(
                    f"{path} changed since load_dali_dataset read it (rebuilt, or upgraded): "
                    f"the shards may not be those its indexes describe; {fix}"
                )
        for shard, stamp in stamps.items():
            try:
                changed = _file_stamp(shard) != stamp
            except FileNotFoundError:
                raise CorruptDatasetError(
                    f"shard {shard} is gone since load_dali_dataset read it: {fix}"
                ) from None
            if changed:
                raise CorruptDatasetError(
                    f"shard {shard} changed (size or modification time) since load_dali_dataset "
                    "checked its records; DALI reads no checksum, so call load_dali_dataset "
                    "again, which checks them again (python -m beam_pipeline verify checks "
                    "the whole build)"
                )

    return check


# The decoder's arguments the loader sets itself (`dali_pipeline`'s `decoding` and its crops'
# windows), and the output type the resize after it needs.
_LOADERS_DECODER_OPTIONS = (
    "device", "output_type", "adjust_orientation", "axis_names", "normalized_anchor",
    "normalized_shape", "dtype",
)  # fmt: skip


def _checked_decoder_options(options: Mapping[str, object] | None) -> dict[str, object]:
    """`decoder_options` as a dict, or a TypeError/ValueError naming what is wrong."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise TypeError(
            f"decoder_options must be a dict of DALI decoder argument names, not {options!r}"
        )
    owned = sorted(set(options) & set(_LOADERS_DECODER_OPTIONS))
    if owned:
        raise ValueError(
            f"decoder_options may not set {', '.join(owned)}: the loader sets "
            f"{', '.join(_LOADERS_DECODER_OPTIONS)} (device= chooses the GPU or the CPU, "
            "dtype= the output's type)"
        )
    return dict(options)


def _device_id(device: str) -> int | None:
    """DALI's device_id for `device`: 0 for the GPU, None for the CPU backend."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, not {device!r}")
    gpus = dali_backend.GetCUDADeviceCount()
    if device == "gpu" and gpus == 0:
        raise ValueError('device="gpu", but DALI sees no CUDA device; use device="cpu"')
    return 0 if device == "gpu" or (device == "auto" and gpus > 0) else None


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
    ):
        super().__init__(workers=1, use_multiprocessing=False)
        self._pipeline = pipeline
        self._unchanged = unchanged  # raises when the build changed since it was read
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
        arrays = tuple(self._convert(output)[:real] for output in outputs)
        return arrays if len(arrays) > 1 else arrays[0]


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


def dali_pipeline(
    *,
    files,
    indexes,
    batch_size,
    num_threads,
    device_id,
    seed,
    image_size,
    training,
    label_mode,
    num_classes,
    dtype,
    config,
    decoder_options: Mapping[str, object] | None = None,
    prefetch_batches: int = 2,
    with_windows: bool = False,
):
    """The DALI pipeline; `with_windows` also returns each crop's anchor, shape, the source
    image's shape and its main box (for tests).

    Training order is `load_dataset`'s: the files in a random order every epoch (the first
    one too: the list is permuted here, DALI permutes it after each epoch), their records
    mixed in a buffer of `config.shuffle_buffer` records. The pipeline's seed drives the buffer
    and the augmentation, DALI's `shuffle_after_epoch_seed` the file order; without a seed
    both are drawn at random, since DALI's default for the latter is one fixed seed.
    """
    height, width = image_size
    # DALI's seeds are in [0, 2**31) (-1 asks DALI for a random one): derived from any int
    # seed, the same for the same seed; drawn fresh without one.
    entropy = None if seed is None else (abs(seed), int(seed < 0))
    pipeline_seed, file_seed, order_seed, crop_seed = (
        int(value) for value in np.random.SeedSequence(entropy).generate_state(4) >> 1
    )
    shuffle = {}
    if training:
        order = np.random.default_rng(order_seed).permutation(len(files))
        files, indexes = [files[i] for i in order], [indexes[i] for i in order]
        shuffle = {
            "random_shuffle": True,
            "initial_fill": config.shuffle_buffer,
            "shuffle_after_epoch": True,
            "shuffle_after_epoch_seed": file_seed,
        }

    @pipeline_def(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=device_id,
        seed=pipeline_seed,
        prefetch_queue_depth=prefetch_batches,
    )
    def pipeline():
        features = {F.ENCODED: tfrec.FixedLenFeature((), tfrec.string, "")}
        if label_mode is not None:
            features[F.LABEL] = tfrec.FixedLenFeature([1], tfrec.int64, -1)
        crop = training and config.random_crop
        if crop:
            features.update({key: tfrec.VarLenFeature(tfrec.float32, 0.0) for key in F.BOX_KEYS_YX})
        records = fn.readers.tfrecord(
            path=files,
            index_path=indexes,
            features=features,
            name=READER,
            pad_last_batch=True,
            # Plain reads: DALI keeps each file's memory map by its path for the process, so
            # a dataset made after a rebuild read the old shards' bytes through the new
            # indexes (labels from other records, no error).
            dont_use_mmap=True,
            **shuffle,
        )
        encoded = records[F.ENCODED]
        decoding = decoder_arguments(device_id, decoder_options)
        windows = ()
        if crop:
            # load_dataset's crop (tf.image.sample_distorted_bounding_box's algorithm), drawn in
            # Python: DALI's random_bbox_crop samples each side at least sqrt(0.08) of the
            # image's, which left elongated images almost no window (a 1000x200 image was
            # read whole every time; tf.image, 3-6%), and its fallback could miss the object.
            shape = fn.peek_image_shape(encoded, adjust_orientation=False)
            anchor, size, box = fn.python_function(
                shape,
                *(records[key] for key in F.BOX_KEYS_YX),
                function=functools.partial(
                    crop_windows, rng=random.Random(crop_seed), config=config
                ),
                num_outputs=3,
                batch_processing=True,
            )
            windows = (anchor, size, shape, box)
        elif config.eval_central_crop < 1.0:
            # tf.image.central_crop's whole-pixel window, as load_dataset cuts it
            # (`preprocessing._central_window`), not a fractional one.
            # (In float64, as TensorFlow's: DALI keeps a constant as float32, and 0.6 * 130
            # is then 78.0000031, which moved such windows by a pixel.)
            shape = fn.peek_image_shape(encoded, adjust_orientation=False)
            anchor, size = fn.python_function(
                shape,
                function=functools.partial(central_windows, fraction=config.eval_central_crop),
                num_outputs=2,
                batch_processing=True,
            )
        else:
            anchor = size = None
        if anchor is None:
            images = fn.decoders.image(encoded, **decoding)
        else:  # the window's pixels alone are decoded
            images = fn.decoders.image_slice(
                encoded,
                anchor,
                size,
                axis_names="HW",
                normalized_anchor=False,
                normalized_shape=False,
                **decoding,
            )
        images = fn.resize(
            images,
            resize_x=width,
            resize_y=height,
            interp_type=types.INTERP_LINEAR,
            antialias=False,
            dtype=types.FLOAT if dtype == "float32" else types.UINT8,
        )
        if training and config.random_flip:
            images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
        if dtype == "float32":
            low, high = config.value_range
            # Clamped: the float resize's rounding took a white pixel to 1.0000001, past high.
            images = dmath.clamp(images * ((high - low) / 255.0) + low, low, high)
        outputs = (images,)
        if label_mode is not None:
            label = fn.squeeze(records[F.LABEL], axes=[0])
            if label_mode == "one_hot":
                label = fn.one_hot(label, num_classes=one_hot_length(num_classes))
            else:
                label = fn.cast(label, dtype=types.INT32)
            if device_id is not None:
                label = label.gpu()
            outputs += (label,)
        return (*outputs, *windows) if with_windows else outputs

    try:
        return pipeline()
    except (KeyError, TypeError, ValueError) as error:
        if not decoder_options:
            raise
        # DALI's own KeyError ("Argument ... is not defined for operator") or a conversion
        # error from deep inside it, which named neither the argument nor decoder_options.
        raise ValueError(
            f"decoder_options {dict(decoder_options)!r}: DALI's JPEG decoder refused them: {error}"
        ) from None


def prefetch_depth(device_id: int | None, prefetch_batches: int | None) -> int:
    """DALI's `prefetch_queue_depth`: `prefetch_batches`, or by default 16 on the GPU (where
    the model's kernels delay DALI's) and 2 on the CPU backend."""
    if prefetch_batches is not None:
        return int(prefetch_batches)
    return GPU_PREFETCH_BATCHES if device_id is not None else 2


def decoder_arguments(
    device_id: int | None, decoder_options: Mapping[str, object] | None
) -> dict[str, object]:
    """The JPEG decoder's arguments: nvJPEG ("mixed") on the GPU with none of the images for
    the hardware decoder unless `decoder_options` says otherwise, DALI's CPU decoder without
    one; the pixels as stored, as load_dataset decodes them (DALI's decoders would turn an
    image by its EXIF orientation, away from its boxes)."""
    return {
        **({"hw_decoder_load": GPU_HW_DECODER_LOAD} if device_id is not None else {}),
        **(decoder_options or {}),
        "device": "cpu" if device_id is None else "mixed",
        "output_type": types.RGB,
        "adjust_orientation": False,
    }
