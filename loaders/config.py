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
        (Inception's defaults); the crop keeps `min_object_covered` of the main object's box.
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
        if self.shuffle_buffer < 1:
            raise ValueError("shuffle_buffer must be at least 1")
        if not 0.0 < self.eval_central_crop <= 1.0:
            raise ValueError("eval_central_crop must be in (0, 1]")
        if not 0.0 < self.crop_area_range[0] <= self.crop_area_range[1] <= 1.0:
            raise ValueError("crop_area_range must satisfy 0 < low <= high <= 1")
