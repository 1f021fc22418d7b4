"""The loader's knobs, in one small frozen config. Defaults suit ImageNet-style training."""

from __future__ import annotations

import dataclasses

AUTOTUNE = -1  # tf.data.AUTOTUNE, without importing TensorFlow here


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
        (of a labelled image, the largest box of its label's class: the object it is labelled by).
      eval_central_crop: fraction kept by the evaluation central crop (1.0: none).
      value_range: images are scaled linearly from [0, 255] to this range.
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

    def __post_init__(self):
        """Refuses, naming the field, a value tf.data would reject only when iterating (or
        silently misuse): ValueError or TypeError."""
        _count("shuffle_buffer", self.shuffle_buffer, low=1)
        _count("cycle_length", self.cycle_length, low=1, autotune=True)
        _count("num_parallel_calls", self.num_parallel_calls, low=1, autotune=True)
        _count("prefetch", self.prefetch, low=0, autotune=True)
        for name in ("random_crop", "random_flip"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"ReadConfig.{name} must be True or False, not {getattr(self, name)!r}"
                )
        low, high = _pair("crop_area_range", self.crop_area_range)
        if not 0.0 < low <= high <= 1.0:
            raise ValueError("ReadConfig.crop_area_range must satisfy 0 < low <= high <= 1")
        low, high = _pair("crop_aspect_ratio_range", self.crop_aspect_ratio_range)
        if not 0.0 < low <= high:
            raise ValueError("ReadConfig.crop_aspect_ratio_range must satisfy 0 < low <= high")
        if not _is_number(self.min_object_covered) or not 0.0 <= self.min_object_covered <= 1.0:
            raise ValueError(
                f"ReadConfig.min_object_covered must be in [0, 1], not {self.min_object_covered!r}"
            )
        if not _is_number(self.eval_central_crop) or not 0.0 < self.eval_central_crop <= 1.0:
            raise ValueError("ReadConfig.eval_central_crop must be in (0, 1]")
        low, high = _pair("value_range", self.value_range)
        if not low < high:
            raise ValueError(
                "ReadConfig.value_range must be (low, high) with low < high, "
                f"not {self.value_range!r}"
            )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(name: str, value, *, low: int, autotune: bool = False) -> None:
    """An int knob at least `low` (or AUTOTUNE where `autotune`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ReadConfig.{name} must be an int, not {value!r}")
    if value < low and not (autotune and value == AUTOTUNE):
        allowed = f"at least {low}" + (" or AUTOTUNE (-1)" if autotune else "")
        raise ValueError(f"ReadConfig.{name} must be {allowed}, not {value}")


def _pair(name: str, value) -> tuple[float, float]:
    """A (low, high) pair of numbers."""
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(map(_is_number, value)):
        raise TypeError(f"ReadConfig.{name} must be a pair of numbers, not {value!r}")
    return value[0], value[1]
