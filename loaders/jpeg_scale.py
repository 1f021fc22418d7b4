"""The build's JPEGs decoded at a DCT scale: 1/2, 1/4 or 1/8 of their size, where the part of
the image the output shows still has at least the output's pixels (`ReadConfig.dct_scaling`).

libjpeg scales inside its inverse DCT (an 8x8 block becomes 4x4, 2x2 or 1x1 pixels): fewer
pixels transformed, converted to RGB and handed to the resize, which then shrinks by less than
2x. That is faster (a 4000x3000 photo decodes in about 0.4x the time at 1/8) and it aliases
less: the bilinear resize without antialias that follows (tf.keras's and the decode limit's)
samples four source pixels for each output pixel and skips the rest, however many there are.
Figures: benchmarks/RESULTS.md, "Loader: decoding at a DCT scale".
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import tensorflow as tf

from schemas.metadata import SplitInfo, histogram_median

RATIOS = (1, 2, 4, 8)  # the scales tf.io.decode_jpeg takes (its `ratio`: 1/ratio of each side)


def decode_jpeg(encoded: tf.Tensor, ratio: int = 1, window: tf.Tensor | None = None) -> tf.Tensor:
    """uint8 RGB of JPEG bytes at 1/`ratio` of their size; `window` [y, x, height, width] in
    the pixels of that scale: only that part is decoded."""
    if window is None:
        return tf.io.decode_jpeg(encoded, channels=3, ratio=ratio, dct_method="INTEGER_FAST")
    return tf.io.decode_and_crop_jpeg(
        encoded, window, channels=3, ratio=ratio, dct_method="INTEGER_FAST"
    )


def scaled_shape(shape: tf.Tensor, ratio) -> tf.Tensor:
    """[height, width] of a JPEG of `shape` decoded at 1/`ratio`: libjpeg rounds up."""
    return (shape + ratio - 1) // ratio


def decode_for_output(
    encoded: tf.Tensor,
    image_size: tuple[int, int],
    central_crop: float,
    scaling: bool,
    shape: tf.Tensor | None = None,
) -> tf.Tensor:
    """A JPEG decoded whole at 1/r, the largest r of RATIOS for which its central crop
    (`central_crop` of each side, `tf.image.central_crop`'s arithmetic) is at least r times
    `image_size` (`may_scale`'s "twice the output" at 1/2); at full size without `scaling`.
    `shape`: int32 [height, width] where known (a record's: reading the JPEG's header for it
    took 3% of an evaluation's CPU), else read from the header."""
    if not scaling:
        return decode_jpeg(encoded)
    if shape is None:
        shape = tf.io.extract_jpeg_shape(encoded)[:2]
    kept = shape - 2 * _central_start(shape, central_crop) if central_crop < 1.0 else shape
    return _decode_at(encoded, _scale_index(kept, image_size))


def decode_window(
    encoded: tf.Tensor,
    shape: tf.Tensor,
    window: tf.Tensor,
    image_size: tuple[int, int],
    scaling: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(pixels, shape, window): `window` [y, x, height, width] of a JPEG of `shape` decoded at
    1/r, the largest r of RATIOS for which it is at least r times `image_size`, with the shape
    and window at that scale (the window grown outwards to whole pixels of it), so boxes
    follow the pixels."""
    if not scaling:
        return decode_jpeg(encoded, window=window), shape, window
    index = _scale_index(window[2:], image_size)

    def at(ratio: int) -> Callable[[], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        def decode():  # (the window's arithmetic in the branch: none at full size)
            if ratio == 1:
                return decode_jpeg(encoded, window=window), shape, window
            scaled = scaled_shape(shape, ratio)
            start = window[:2] // ratio
            end = tf.minimum(scaled_shape(window[:2] + window[2:], ratio), scaled)
            part = tf.concat([start, end - start], 0)
            return decode_jpeg(encoded, ratio, part), scaled, part

        return decode

    image, scaled, part = tf.switch_case(index, [at(ratio) for ratio in RATIOS])
    return tf.ensure_shape(image, [None, None, 3]), scaled, part


def may_scale(split: SplitInfo, image_size: tuple[int, int]) -> bool:
    """Whether `ReadConfig(dct_scaling=True)` can scale any image of `split`: its tallest and
    its widest image (the metadata's histograms; each image is at most both) are at least
    twice the output. Where not, the loader leaves the choice out: the same pixels, and the
    choice costs a training image 2-6% of its CPU (benchmarks/RESULTS.md, "Loader: decoding
    at a DCT scale"). A build without the histograms (schema before 1.2): it may."""
    if not split.image_heights or not split.image_widths:
        return True
    return (
        max(split.image_heights) >= 2 * image_size[0]
        and max(split.image_widths) >= 2 * image_size[1]
    )


def scaling_hint(split: SplitInfo, image_size: tuple[int, int]) -> str | None:
    """What to say where `split`'s median width and height (as `stats` prints them) are at
    least 4 times the output's (most of each decode thrown away: photos kept at their size,
    `--image_policy original`), or None."""
    if not split.image_heights or not split.image_widths:
        return None
    height = histogram_median(split.image_heights)
    width = histogram_median(split.image_widths)
    times = int(min(height // image_size[0], width // image_size[1]))
    if times < 4:
        return None
    ratio = 8 if times >= 8 else 4
    return (
        f"its images' median width and height are {width:g} and {height:g} px (`stats`) for a "
        f"{image_size[1]}x{image_size[0]} output: "
        f"config=ReadConfig(dct_scaling=True) decodes such images at 1/{ratio} of their size "
        "(3000-4000 px photos at 224x224: 1.15-1.31x less CPU an image; small images gain "
        "little), or rebuild with "
        f"--image_policy shorter_side --image_size {2 * max(image_size)}"
    )


def central_window(shape: tf.Tensor, fraction: float) -> tf.Tensor:
    """[y, x, height, width] of `tf.image.central_crop`'s window into an image of `shape`
    ([height, width, ...]), with its arithmetic."""
    start = _central_start(shape[:2], fraction)
    return tf.concat([start, shape[:2] - 2 * start], 0)


def _central_start(sides: tf.Tensor, fraction: float) -> tf.Tensor:
    """`tf.image.central_crop`'s offsets into `sides` (int32, any shape), in float64."""
    sides64 = tf.cast(sides, tf.float64)
    return tf.cast((sides64 - sides64 * fraction) / 2, sides.dtype)


# In a few vectorized ops a record: a hundred small ones (one per ratio and side) cost
# evaluation 3-4% of its CPU at 224x224 (benchmarks/RESULTS.md, "Loader: decoding at a DCT scale").
def _scale_index(sides: tf.Tensor, image_size: tuple[int, int]) -> tf.Tensor:
    """The index into RATIOS of the largest ratio r for which `sides` [height, width] are at
    least r times `image_size` (0: full size): h >= r * out_h exactly when h // out_h >= r,
    so the fewest times the output fits in a side decides."""
    times = tf.reduce_min(sides // tf.constant(image_size, sides.dtype))
    return tf.reduce_sum(tf.cast(times >= tf.constant(RATIOS[1:], sides.dtype), tf.int32))


def _decode_at(encoded: tf.Tensor, index: tf.Tensor, window: tf.Tensor | None = None):
    """`decode_jpeg` at RATIOS[index] (a static attribute of the op: one branch a ratio)."""
    branches = [functools.partial(decode_jpeg, encoded, ratio, window) for ratio in RATIOS]
    return tf.ensure_shape(tf.switch_case(index, branches), [None, None, 3])
