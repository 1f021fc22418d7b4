"""DALI's pipeline for `loaders.dali.load_dali_dataset`, and the DALI-only settings it runs with.

`dali_pipeline` defines the graph from small steps, each called inside DALI's `pipeline_def`
function: the seeds and the file order (`_seeds`, `_file_order`), the TFRecord reader
(`_read`), the crop window (`_window`: training's random crop, drawn as
`tf.image.sample_distorted_bounding_box` draws it, or evaluation's central crop), the decoding
of the window's pixels (`_decoded`: nvJPEG, "mixed", on the GPU), the resize, flip and scaling
(`_finished`), and the labels (`_labels`). What `load_dataset` also takes comes as one
`loaders.spec.LoadSpec`; what only DALI takes (the device, threads, decoder arguments, batches
prepared ahead) as one `DaliSettings`. Nothing here is imported by `import loaders`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from loaders.crops import central_windows, crop_windows
from loaders.preprocessing import is_int
from loaders.spec import LoadSpec
from schemas import features as F

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

# On the GPU: batches prepared ahead, and the share of images for the hardware JPEG decoder.
# Measured feeding ResNet-50 (batch 256, bfloat16; benchmarks/RESULTS.md, "GPU: does ResNet-50
# wait on input"): on an H200 (`4f74434`) DALI's defaults (2 batches, hw_decoder_load 0.65) fed
# it at 0.81-0.82 of its speed on a cached batch, although DALI alone supplied 2.4x its rate;
# 16 batches and every image to the CUDA decoder fed it at 0.98 (one run; 8 batches: 0.95,
# twice). On an H100 (`dcd8ed1`) these defaults fed it at 0.98, 1.00 and 0.99 (three runs),
# DALI's own at 0.82-0.84.
GPU_PREFETCH_BATCHES = 16
GPU_HW_DECODER_LOAD = 0.0
MAX_PREFETCH = 64
DEVICES = ("auto", "gpu", "cpu")
READER = "reader"  # the TFRecord reader's name, for DALI's iterators
# The decoder's arguments the loader sets itself (`decoder_arguments` and the crops' windows),
# and the output type the resize after it needs.
_LOADERS_DECODER_OPTIONS = (
    "device", "output_type", "adjust_orientation", "axis_names", "normalized_anchor",
    "normalized_shape", "dtype",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class DaliSettings:
    """How DALI runs the pipeline: the arguments `load_dali_dataset` has and `load_dataset`
    lacks, resolved (`DaliSettings.checked` makes them from those arguments).

    Attributes:
      device_id: 0 for the GPU (nvJPEG decoding, batches on the GPU), None for DALI's CPU
        backend.
      num_threads: DALI's CPU threads.
      decoder_options: more arguments for DALI's JPEG decoder (see `checked`).
      prefetch_batches: DALI's `prefetch_queue_depth`.
    """

    device_id: int | None
    num_threads: int
    decoder_options: Mapping[str, object] = dataclasses.field(default_factory=dict)
    prefetch_batches: int = 2

    @classmethod
    def checked(
        cls,
        device: str,
        num_threads: int | None,
        decoder_options: Mapping[str, object] | None,
        prefetch_batches: int | None,
    ) -> DaliSettings:
        """The settings of `load_dali_dataset`'s arguments (its defaults: "auto" and None),
        each checked (TypeError or ValueError naming it).

        Args:
          device: "gpu" (device 0; nvJPEG decoding, batches on the GPU), "cpu" (DALI's CPU
            backend), or "auto": the GPU when DALI sees one.
          num_threads: DALI's CPU threads (default: the cores this process may use).
          decoder_options: more arguments for DALI's JPEG decoder (`fn.decoders.image`, and
            `image_slice` for training crops and evaluation central crops); DALI refuses a
            name it does not know. On the GPU the loader sets `hw_decoder_load` to 0 (every
            image decoded by CUDA kernels, none by the A100's, H100's or H200's hardware JPEG
            decoder: the model was fed faster so, see docs/dali.md); `{"hw_decoder_load": 0.65}`
            is DALI's own default. The loader's own (`device`, `output_type`,
            `adjust_orientation`, the crop window's `axis_names`, `normalized_anchor`,
            `normalized_shape`, and `dtype`) are refused.
          prefetch_batches: how many batches DALI prepares ahead of the one being used (its
            `prefetch_queue_depth`, at least 1). Default: 16 on the GPU, where the model's own
            kernels delay DALI's and a deep queue absorbs that (its memory: 16 batches of
            decoded images and their outputs, up to ~3 GB for batches of 256 ImageNet-sized
            images, an estimate), 2 on the CPU backend.
        """
        options = _checked_decoder_options(decoder_options)
        cores = len(os.sched_getaffinity(0))
        for name, value, default, most, why in (
            ("num_threads", num_threads, "the cores this process may use", max(64, 4 * cores),
             f"max(64, 4 x the {cores} cores)"),
            ("prefetch_batches", prefetch_batches, "16 on the GPU, 2 on the CPU", MAX_PREFETCH,
             "each batch ahead holds its decoded images"),
        ):  # fmt: skip
            _check_count(name, value, default, most, why)
        device_id = _device_id(device)
        return cls(
            device_id=device_id,
            num_threads=cores if num_threads is None else int(num_threads),
            decoder_options=options,
            prefetch_batches=prefetch_depth(device_id, prefetch_batches),
        )


def _check_count(name: str, value, default: str, most: int, why: str) -> None:
    """A count argument: an int from 1 to `most`, or None (`default`)."""
    if value is not None and not is_int(value):
        raise TypeError(f"{name} must be an int or None, not {value!r}")
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1 (or None: {default}), not {value}")
    if value is not None and value > most:
        # DALI aborted the process past its thread limit, and spun for minutes filling a
        # queue of a million batches.
        raise ValueError(f"{name} must be at most {most} ({why}), not {value}")


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
    gpus = dali_backend.GetCUDADeviceCount()  # type: ignore[attr-defined]  # not in DALI's stubs
    if device == "gpu" and gpus == 0:
        raise ValueError('device="gpu", but DALI sees no CUDA device; use device="cpu"')
    return 0 if device == "gpu" or (device == "auto" and gpus > 0) else None


def prefetch_depth(device_id: int | None, prefetch_batches: int | None) -> int:
    """DALI's `prefetch_queue_depth`: `prefetch_batches`, or by default 16 on the GPU (where
    the model's kernels delay DALI's) and 2 on the CPU backend."""
    if prefetch_batches is not None:
        return int(prefetch_batches)
    return GPU_PREFETCH_BATCHES if device_id is not None else 2


def decoder_arguments(
    device_id: int | None, decoder_options: Mapping[str, object] | None
) -> dict[str, Any]:
    """The JPEG decoder's arguments: nvJPEG ("mixed") on the GPU with none of the images for
    the hardware decoder unless `decoder_options` says otherwise, DALI's CPU decoder without
    one; the pixels as stored, as load_dataset decodes them (DALI's decoders would turn an
    image by its EXIF orientation, away from its boxes)."""
    return {
        **({"hw_decoder_load": GPU_HW_DECODER_LOAD} if device_id is not None else {}),
        **(decoder_options or {}),
        "device": "cpu" if device_id is None else "mixed",
        "output_type": types.DALIImageType.RGB,
        "adjust_orientation": False,
    }


def dali_pipeline(
    spec: LoadSpec,
    settings: DaliSettings,
    files: list[str],
    indexes: list[str],
    num_labels: int,
    *,
    with_windows: bool = False,
):
    """The DALI pipeline of `spec`'s batches of `files` (read through `indexes`), one-hot
    labels `num_labels` wide (`len(spec.label_names(info, split))`);
    `with_windows` also returns each crop's anchor, shape, the source image's shape and its
    main box (for tests); without it, a labelled pipeline returns each record's int64 label
    last, on the host, which `DaliDataset(label_limit=...)` checks and drops.

    Training order is `load_dataset`'s: the files in a random order every epoch (the first
    one too: the list is permuted here, DALI permutes it after each epoch), their records
    mixed in a buffer of `config.shuffle_buffer` records. The pipeline's seed drives the buffer
    and the augmentation, DALI's `shuffle_after_epoch_seed` the file order; without a seed
    both are drawn at random, since DALI's default for the latter is one fixed seed.
    """
    pipeline_seed, file_seed, order_seed, crop_seed = _seeds(spec.seed)
    files, indexes, shuffle = _file_order(files, indexes, spec, order_seed, file_seed)

    @pipeline_def(
        batch_size=spec.batch_size,
        num_threads=settings.num_threads,
        device_id=settings.device_id,  # type: ignore[arg-type]  # None: the CPU backend
        seed=pipeline_seed,
        prefetch_queue_depth=settings.prefetch_batches,
    )
    def pipeline():
        # The operators in the order they were always made (reader, window, decoder, resize,
        # flip, labels): DALI seeds its random ones from the pipeline's seed, so a new order
        # could give a seed other batches.
        records = _read(files, indexes, spec, shuffle)
        anchor, size, windows = _window(records, spec, crop_seed)
        images = _decoded(records[F.ENCODED], anchor, size, settings)
        outputs = (_finished(images, spec), *_labels(records, spec, settings, num_labels))
        if with_windows:
            return (*outputs, *windows)
        # The records' own labels last, on the host, for `DaliDataset` to check: DALI's
        # one_hot and cast wrap or clip a label past the build's (2**32 + 2 came out as 2).
        return outputs if spec.label_mode is None else (*outputs, records[F.LABEL])

    try:
        return pipeline()
    except (KeyError, TypeError, ValueError) as error:
        if not settings.decoder_options:
            raise
        # DALI's own KeyError ("Argument ... is not defined for operator") or a conversion
        # error from deep inside it, which named neither the argument nor decoder_options.
        raise ValueError(
            f"decoder_options {dict(settings.decoder_options)!r}: DALI's JPEG decoder refused "
            f"them: {error}"
        ) from None


def _seeds(seed: int | None) -> tuple[int, int, int, int]:
    """The pipeline's, the file order's (after each epoch), the first epoch's file order's and
    the crops' seeds. DALI's seeds are in [0, 2**31) (-1 asks DALI for a random one): derived
    from any int seed, the same for the same seed; drawn fresh without one."""
    entropy = None if seed is None else (abs(seed), int(seed < 0))
    pipeline_seed, file_seed, order_seed, crop_seed = (
        int(value) for value in np.random.SeedSequence(entropy).generate_state(4) >> 1
    )
    return pipeline_seed, file_seed, order_seed, crop_seed


def _file_order(
    files: list[str], indexes: list[str], spec: LoadSpec, order_seed: int, file_seed: int
) -> tuple[list[str], list[str], dict[str, Any]]:
    """(files, indexes, the reader's shuffling arguments): when training, the files permuted
    for the first epoch, and DALI asked to permute them after each and mix their records."""
    if not spec.training:
        return files, indexes, {}
    order = np.random.default_rng(order_seed).permutation(len(files))
    shuffle = {
        "random_shuffle": True,
        "initial_fill": spec.config.shuffle_buffer,
        "shuffle_after_epoch": True,
        "shuffle_after_epoch_seed": file_seed,
    }
    return [files[i] for i in order], [indexes[i] for i in order], shuffle


def _random_crop(spec: LoadSpec) -> bool:
    return spec.training and spec.config.random_crop


def _read(files: list[str], indexes: list[str], spec: LoadSpec, shuffle: dict[str, Any]):
    """The TFRecord reader's records: the image, the label when there are labels, the boxes
    when training crops."""
    features = {F.ENCODED: tfrec.FixedLenFeature([], tfrec.string, "")}
    if spec.label_mode is not None:
        features[F.LABEL] = tfrec.FixedLenFeature([1], tfrec.int64, -1)
    if _random_crop(spec):
        features.update({key: tfrec.VarLenFeature(tfrec.float32, 0.0) for key in F.BOX_KEYS_YX})
        if spec.label_mode is not None:  # the crop keeps the label's object (`main_boxes`)
            features[F.OBJECT_LABEL] = tfrec.VarLenFeature(tfrec.int64, -1)
    return fn.readers.tfrecord(
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


def _window(records, spec: LoadSpec, crop_seed: int):
    """(anchor, shape, what `with_windows` adds) of each image's window: training's random
    crop, evaluation's central crop, or (None, None, ()) for the whole image."""
    encoded = records[F.ENCODED]
    if _random_crop(spec):
        # load_dataset's crop (tf.image.sample_distorted_bounding_box's algorithm), drawn in
        # Python: DALI's random_bbox_crop samples each side at least sqrt(0.08) of the
        # image's, which left elongated images almost no window (a 1000x200 image was
        # read whole every time; tf.image, 3-6%), and its fallback could miss the object.
        shape = fn.peek_image_shape(encoded, adjust_orientation=False)
        labelled = (records[F.OBJECT_LABEL], records[F.LABEL]) if F.OBJECT_LABEL in records else ()
        found: Any = fn.python_function(
            shape,
            *(records[key] for key in F.BOX_KEYS_YX),
            *labelled,
            function=functools.partial(
                crop_windows, rng=random.Random(crop_seed), config=spec.config
            ),
            num_outputs=3,
            batch_processing=True,
        )
        anchor, size, box = found
        return anchor, size, (anchor, size, shape, box)
    if spec.config.eval_central_crop < 1.0:
        # tf.image.central_crop's whole-pixel window, as load_dataset cuts it
        # (`jpeg_scale.central_window`), not a fractional one.
        # (In float64, as TensorFlow's: DALI keeps a constant as float32, and 0.6 * 130
        # is then 78.0000031, which moved such windows by a pixel.)
        shape = fn.peek_image_shape(encoded, adjust_orientation=False)
        central: Any = fn.python_function(
            shape,
            function=functools.partial(central_windows, fraction=spec.config.eval_central_crop),
            num_outputs=2,
            batch_processing=True,
        )
        anchor, size = central
        return anchor, size, ()
    return None, None, ()


def _decoded(encoded, anchor, size, settings: DaliSettings):
    """The decoded images: the window's pixels alone when there is a window."""
    decoding = decoder_arguments(settings.device_id, settings.decoder_options)
    if anchor is None:
        return fn.decoders.image(encoded, **decoding)
    return fn.decoders.image_slice(
        encoded,
        anchor,
        size,
        axis_names="HW",
        normalized_anchor=False,
        normalized_shape=False,
        **decoding,
    )


def _finished(images, spec: LoadSpec):
    """The decoded images resized, flipped when training, and scaled for float32."""
    height, width = spec.image_size
    images = fn.resize(
        images,
        resize_x=width,
        resize_y=height,
        interp_type=types.DALIInterpType.INTERP_LINEAR,
        antialias=False,
        dtype=types.DALIDataType.FLOAT if spec.dtype == "float32" else types.DALIDataType.UINT8,
    )
    if spec.training and spec.config.random_flip:
        images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
    if spec.dtype == "float32":
        low, high = spec.config.value_range
        # Clamped: the float resize's rounding took a white pixel to 1.0000001, past high.
        images = dmath.clamp(images * ((high - low) / 255.0) + low, low, high)
    return images


def _labels(records, spec: LoadSpec, settings: DaliSettings, num_labels: int) -> tuple:
    """() without labels, or (one-hot float32 labels `num_labels` wide, binary [1] float32
    ones, or int32 ones,), on the GPU when there is one."""
    if spec.label_mode is None:
        return ()
    label = fn.squeeze(records[F.LABEL], axes=[0])
    if spec.label_mode == "one_hot":
        label = fn.one_hot(label, num_classes=num_labels)
    elif spec.label_mode == "binary":  # [1] float32, 0.0 or 1.0, as Keras's
        label = fn.cast(records[F.LABEL], dtype=types.DALIDataType.FLOAT)
    else:
        label = fn.cast(label, dtype=types.DALIDataType.INT32)
    if settings.device_id is not None:
        label = label.gpu()
    return (label,)
