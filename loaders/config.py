"""The loader's knobs, in one small frozen config. Defaults suit ImageNet-style training."""

from __future__ import annotations

import dataclasses
import math
import numbers

AUTOTUNE = -1  # tf.data.AUTOTUNE, without importing TensorFlow here
# `ReadConfig(cache=None)` keeps an input pipeline's part of a split in memory when that takes
# at most this much (TFDS autocaches up to 250 MiB): what it saves, benchmarks/RESULTS.md,
# "Loader on 2 cores".
AUTO_CACHE_BYTES = 256 << 20


def tf_data_value(value: int) -> int:
    """A knob as a tf.data argument: `AUTOTUNE` becomes `tf.data.AUTOTUNE`."""
    import tensorflow as tf  # here, so that importing the config does not import TensorFlow

    return tf.data.AUTOTUNE if value == AUTOTUNE else value


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    """How shards become batches.

    Attributes:
      shuffle_buffer: elements in the training shuffle buffer (the build already shuffled
        globally; this only mixes neighbouring records across files).
      cycle_length: files read at once by the interleave (AUTOTUNE: up to the number of files).
      num_parallel_calls: parallel parse+decode calls (AUTOTUNE lets tf.data pick).
      prefetch: batches prefetched (AUTOTUNE).
      random_crop: training crops with `decode_and_crop_jpeg` (else a plain resize).
      random_flip: training flips left-right.
      crop_area_range, crop_aspect_ratio_range, min_object_covered: the random crop's limits
        (Inception's defaults); the crop keeps `min_object_covered` of the main object's box
        (the largest; loaded with one-hot, int or binary labels, the largest of the label's
        class: the object the image is labelled by).
      eval_central_crop: fraction kept by the evaluation central crop (1.0: none).
      value_range: images are scaled linearly from [0, 255] to this range.
      dct_scaling: decode a JPEG at 1/2, 1/4 or 1/8 of its size (libjpeg's DCT scaling)
        where the part shown is at least 2, 4 or 8 times the output: faster on large images,
        and less aliased than the bilinear resize of the whole decode. Off by default, as
        tf.data's usual pipelines and `load_dali_dataset` decode whole; give the same config
        to `preprocess_for_eval` when serving a model trained with it.
      cache: keep the first full epoch in memory for the next ones (tf.data's cache):
        training, the records (crops and flips are drawn anew each epoch, and the shuffle
        buffer takes the whole split: a full reshuffle each epoch); evaluation, the decoded
        images (the same values; a quarter of the memory as uint8). None (the default): when
        that takes at most `AUTO_CACHE_BYTES` (256 MiB per input pipeline; TFDS autocaches up
        to 250 MiB); True: whatever it takes (refused past this machine's memory); False: never.
    """

    shuffle_buffer: int = 1024
    cycle_length: int = AUTOTUNE
    num_parallel_calls: int = AUTOTUNE
    prefetch: int = AUTOTUNE
    random_crop: bool = True
    random_flip: bool = True
    crop_area_range: tuple[float, float] = (0.08, 1.0)
    crop_aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3)
    min_object_covered: float = 0.1
    eval_central_crop: float = 1.0
    value_range: tuple[float, float] = (0.0, 1.0)
    cache: bool | None = None
    dct_scaling: bool = False

    def __post_init__(self):
        """Refuses, naming the field, a value tf.data would reject only when iterating (or
        silently misuse): ValueError or TypeError. NumPy numbers are taken, as Python's (as
        `load_dataset` takes them), and kept as Python's."""
        _count(self, "shuffle_buffer", low=1)
        _count(self, "cycle_length", low=1, autotune=True)
        _count(self, "num_parallel_calls", low=1, autotune=True)
        _count(self, "prefetch", low=0, autotune=True)
        if self.cache is not None and not isinstance(self.cache, bool):
            raise TypeError(f"ReadConfig.cache must be None, True or False, not {self.cache!r}")
        for name in ("random_crop", "random_flip", "dct_scaling"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"ReadConfig.{name} must be True or False, not {getattr(self, name)!r}"
                )
        low, high = _pair(self, "crop_area_range")
        if not 0.0 < low <= high <= 1.0:
            raise ValueError("ReadConfig.crop_area_range must satisfy 0 < low <= high <= 1")
        low, high = _pair(self, "crop_aspect_ratio_range")
        if not 0.0 < low <= high:
            raise ValueError("ReadConfig.crop_aspect_ratio_range must satisfy 0 < low <= high")
        if not _is_number(self.min_object_covered) or not 0.0 <= self.min_object_covered <= 1.0:
            raise ValueError(
                f"ReadConfig.min_object_covered must be in [0, 1], not {self.min_object_covered!r}"
            )
        if not _is_number(self.eval_central_crop) or not 0.0 < self.eval_central_crop <= 1.0:
            raise ValueError("ReadConfig.eval_central_crop must be in (0, 1]")
        for name in ("min_object_covered", "eval_central_crop"):  # (a Fraction, np.float16)
            object.__setattr__(self, name, float(getattr(self, name)))
        low, high = _pair(self, "value_range")
        if not low < high:
            raise ValueError(
                "ReadConfig.value_range must be (low, high) with low < high, "
                f"not {self.value_range!r}"
            )


# The largest float32: the images' values are float32 (a `value_range` past it made every
# pixel inf).
_LARGEST_FLOAT32 = 3.4028234663852886e38


def _is_number(value) -> bool:
    """A real number (Python's or NumPy's, not a bool) that float32 holds: an infinite or
    overflowing `value_range` made every pixel inf or NaN."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value)) and abs(float(value)) <= _LARGEST_FLOAT32
    except OverflowError:  # (10**400)
        return False


# tf.data takes its counts as int64.
_LARGEST_COUNT = 2**63 - 1


def _count(config: ReadConfig, name: str, *, low: int, autotune: bool = False) -> None:
    """An int knob at least `low` (or AUTOTUNE where `autotune`), kept as a Python int."""
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"ReadConfig.{name} must be an int, not {value!r}")
    value = int(value)
    if (value < low and not (autotune and value == AUTOTUNE)) or value > _LARGEST_COUNT:
        allowed = f"at least {low}" + (" or AUTOTUNE (-1)" if autotune else "")
        raise ValueError(f"ReadConfig.{name} must be {allowed} and below 2**63, not {value}")
    object.__setattr__(config, name, value)


def _pair(config: ReadConfig, name: str) -> tuple[float, float]:
    """A (low, high) pair of finite numbers, kept as a tuple of Python floats."""
    value = getattr(config, name)
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(map(_is_number, value)):
        raise TypeError(f"ReadConfig.{name} must be a pair of finite numbers, not {value!r}")
    pair = (float(value[0]), float(value[1]))
    object.__setattr__(config, name, pair)
    return pair
