"""Image preprocessing, in TensorFlow ops only (it runs inside tf.data's C++ threads).

`preprocess_for_eval` is what evaluation uses and what inference on a raw JPEG should use, so a
served model sees exactly what it was validated on.
"""

from __future__ import annotations

import functools
import numbers
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from loaders.config import ReadConfig
from loaders.jpeg_scale import central_window, decode_for_output, decode_jpeg, decode_window

DTYPES = ("float32", "uint8")


class View(NamedTuple):
    """What part of the source image an output image shows, so boxes can follow the pixels.

    Attributes:
      source_shape: int32 [height, width] of the source image as decoded: at its DCT scale
        (`ReadConfig.dct_scaling`), ceil(H / ratio) x ceil(W / ratio).
      window: int32 [y, x, height, width] of the crop in those pixels (the whole image if none).
      flipped: bool scalar, the output was mirrored left-right after the crop.
    """

    source_shape: tf.Tensor
    window: tf.Tensor
    flipped: tf.Tensor


def output_dtype(dtype) -> str:
    """The name "float32" or "uint8" from a name or a dtype; ValueError for any other."""
    try:
        name = tf.as_dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    return name


def checked_image_size(image_size) -> tuple[int, int]:
    """`image_size` as (height, width): one int for a square, or a pair of ints.

    Raises:
      TypeError, ValueError: naming `image_size`, before TensorFlow sees it.
    """
    size = (image_size, image_size) if is_int(image_size) else image_size
    if not isinstance(size, (tuple, list)) or len(size) != 2 or not all(map(is_int, size)):
        raise TypeError(f"image_size must be an int or (height, width), not {image_size!r}")
    if min(size) < 1:
        raise ValueError(f"image_size must be positive, not {image_size!r}")
    return int(size[0]), int(size[1])


def is_int(value) -> bool:
    """Whether `value` is an integer argument: a Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _to_pixels(resized: tf.Tensor) -> tf.Tensor:
    """A resized (float) image → uint8, rounded to the nearest level."""
    return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)


def _scale(image: tf.Tensor, config: ReadConfig) -> tf.Tensor:
    low, high = config.value_range
    return tf.cast(image, tf.float32) * ((high - low) / 255.0) + low


def _finish(image: tf.Tensor, config: ReadConfig, dtype: str) -> tf.Tensor:
    return _to_pixels(image) if dtype == "uint8" else _scale(image, config)


def preprocess_for_eval(
    encoded: tf.Tensor,
    image_size: int | tuple[int, int],
    config: ReadConfig = ReadConfig(),
    dtype: str = "float32",
) -> tf.Tensor:
    """Image file bytes → [H, W, 3]: decode, optional central crop, resize; what the loader
    does to a stored image, for serving a model on files it was not built from.

    A JPEG decodes as the loader decodes the build's; other formats TensorFlow reads (PNG,
    GIF and WebP: their first frame, BMP) as the build stores them: transparency composited
    onto white, grey as RGB; but a GIF's transparent colour, which TensorFlow's decoder does
    not apply (decode such a file with Pillow and `beam_pipeline.core.images.to_rgb`).
    `image_size` is (height, width) or one int, as for `load_dataset` (and refused with its
    messages). float32 scaled to `config.value_range`, or uint8 pixels (`dtype="uint8"`) for
    a model that starts with `normalization_layer(config)`.
    """
    size = checked_image_size(image_size)
    _refuse_not_one_file(encoded)
    return eval_view(encoded, size, config, dtype, any_format=True)[0]


def _refuse_not_one_file(encoded) -> None:
    """TypeError for a file's path (keras.utils.load_img's habit: TensorFlow read the path as
    image bytes and said the format was unknown), ValueError for a batch of files (a NumPy
    error from inside TensorFlow)."""
    shape = encoded.shape if isinstance(encoded, tf.Tensor) else np.shape(encoded)
    if len(shape) if isinstance(shape, tuple) else shape.rank:
        raise ValueError(
            f"preprocess_for_eval takes one image file's bytes (a scalar string), not a batch "
            f"of shape {tuple(shape)}: map it over the files (dataset.map) before batching"
        )
    value = encoded
    if isinstance(encoded, tf.Tensor):
        try:
            value = encoded.numpy()  # eager; a graph's tensor (dataset.map) has no value yet
        except (AttributeError, NotImplementedError):
            return
    if isinstance(value, (str, os.PathLike)) or (
        isinstance(value, bytes)
        and len(value) < 4096
        and b"\0" not in value
        and os.path.isfile(value)
    ):
        raise TypeError(
            f"preprocess_for_eval takes an image file's bytes, not its path {value!r}: pass "
            "tf.io.read_file(path)"
        )


def decode_as_stored(
    encoded: tf.Tensor, jpeg: Callable[[tf.Tensor], tf.Tensor] = decode_jpeg
) -> tf.Tensor:
    """uint8 RGB [H, W, 3] of image file bytes, as the build stores them (`preprocess_for_eval`);
    a JPEG's decoded by `jpeg`."""
    is_jpeg = tf.strings.substr(encoded, 0, 3) == b"\xff\xd8\xff"
    image = tf.cond(is_jpeg, lambda: jpeg(encoded), lambda: _on_white(encoded))
    return tf.ensure_shape(image, [None, None, 3])  # (the branches' shapes differ in a graph)


def _decode_png(encoded: tf.Tensor) -> tf.Tensor:
    """A PNG's pixels with its alpha, where it has one: its own, or its colour key's (tRNS,
    before the first IDAT, in a grey or RGB PNG: asked for 4 channels, libpng makes the key
    an alpha). Not 4 channels always: TensorFlow then fills a palette PNG of under 8 bits'
    (or a 1-bit grey one's) alpha with the bit depth's largest value (15 for 4 bits), and
    its pixels came out blended towards white (the cases: `tests/test_loaders.py`'s
    `PALETTES`)."""
    colour_type = tf.strings.substr(encoded, 25, 1)  # (IHDR's; 0 grey, 2 RGB)
    rgb16 = tf.logical_and(colour_type == b"\x02", tf.strings.substr(encoded, 24, 1) == b"\x10")
    keyed = tf.logical_and(
        _has_chunk_before_data(encoded, b"tRNS"),
        tf.logical_or(colour_type == b"\x00", tf.logical_and(colour_type == b"\x02", ~rgb16)),
    )  # (a 16-bit RGB key: not applied, as the build does not: `core.images._png_key`)
    return tf.cond(
        keyed,
        lambda: tf.io.decode_png(encoded, channels=4),
        lambda: tf.io.decode_png(encoded, channels=0),
    )


def _has_chunk_before_data(encoded: tf.Tensor, kind: bytes) -> tf.Tensor:
    """Whether a PNG holds a chunk of `kind` before its first IDAT, found by walking the chunks
    (length, type, data, CRC), not by searching the bytes: "tRNS" or "IDAT" in a text chunk
    or a profile misled a search."""
    size = tf.cast(tf.strings.length(encoded), tf.int64)

    def more(offset, found, data):
        return tf.logical_and(tf.logical_not(tf.logical_or(found, data)), offset + 8 <= size)

    def step(offset, found, data):
        raw = tf.io.decode_raw(tf.strings.substr(encoded, offset, 4), tf.uint8)
        length = tf.reduce_sum(
            tf.cast(raw, tf.int64) * tf.constant([1 << 24, 1 << 16, 256, 1], tf.int64)
        )
        chunk = tf.strings.substr(encoded, offset + 4, 4)
        return offset + 12 + length, chunk == kind, chunk == b"IDAT"

    start = (tf.constant(8, tf.int64), tf.constant(False), tf.constant(False))
    return tf.while_loop(more, step, start)[1]


def _little_endian(encoded: tf.Tensor, offset: int, size: int) -> tf.Tensor:
    """The unsigned integer of `size` (2 or 4) bytes at `offset`, as int32."""
    raw = tf.io.decode_raw(tf.strings.substr(encoded, offset, size), tf.uint8)
    return tf.reduce_sum(tf.cast(raw, tf.int32) * tf.constant([1, 256, 65536, 16777216][:size]))


def _decode_bmp(encoded: tf.Tensor) -> tf.Tensor:
    """A BMP's RGB pixels. TensorFlow reads an 8-bit BMP's palette indices as grey: they are
    looked up in its palette here (BGRx entries after the info header; biClrUsed of them, or
    256); one of 1, 2 or 4 bits it cannot read at all, which is said."""
    bits = _little_endian(encoded, 28, 2)
    readable = tf.debugging.assert_greater_equal(
        bits,
        8,
        message="a BMP of 1, 2 or 4 bits a pixel, which TensorFlow's decode_bmp cannot read: "
        "store it as PNG (the build reads it, and stores it as JPEG)",
    )

    def from_palette() -> tf.Tensor:
        start, used = 14 + _little_endian(encoded, 14, 4), _little_endian(encoded, 46, 4)
        count = tf.where(used > 0, used, 256)
        table = tf.io.decode_raw(tf.strings.substr(encoded, start, 4 * count), tf.uint8)
        colours = tf.reverse(tf.reshape(table, [-1, 4])[:, :3], axis=[1])
        indices = tf.io.decode_bmp(encoded, channels=0)[:, :, 0]
        return tf.gather(colours, tf.cast(indices, tf.int32))

    with tf.control_dependencies([readable]):
        return tf.cond(bits == 8, from_palette, lambda: tf.io.decode_bmp(encoded, channels=3))


# TensorFlow's decode_image reads WebP from 2.17 on; 2.16 (setup.py allows it) says "Unknown
# image file format. One of JPEG, PNG, GIF, BMP required".
_DECODES_WEBP = tuple(int(part) for part in tf.__version__.split(".")[:2]) >= (2, 17)


def _on_white(encoded: tf.Tensor) -> tf.Tensor:
    """A non-JPEG's first frame as RGB, its alpha (a PNG's colour key too) over white."""
    png = tf.strings.substr(encoded, 0, 4) == b"\x89PNG"
    bmp = tf.strings.substr(encoded, 0, 2) == b"BM"  # (RGB: a 32-bit BMP's 4th byte is no alpha)
    checks = []
    if not _DECODES_WEBP:
        padded = tf.strings.join([encoded, b"\0" * 12])  # (substr fails past the end)
        webp = tf.strings.substr(padded, 8, 4) == b"WEBP"
        message = f"a WebP image, which TensorFlow {tf.__version__}'s decode_image cannot read"
        checks.append(tf.debugging.Assert(tf.logical_not(webp), [message + " (2.17 can)"]))
    with tf.control_dependencies(checks):
        image = tf.case(
            [
                (png, lambda: _decode_png(encoded)),
                (bmp, lambda: _decode_bmp(encoded)),
            ],
            default=lambda: tf.io.decode_image(encoded, expand_animations=False),
        )
    image = tf.ensure_shape(image, [None, None, None])
    channels = tf.shape(image)[-1]
    colour = tf.cond(
        channels < 3, lambda: tf.tile(image[:, :, :1], [1, 1, 3]), lambda: image[:, :, :3]
    )
    if_alpha = tf.logical_or(channels == 2, channels == 4)
    alpha = tf.cond(
        if_alpha,
        lambda: image[:, :, -1:],
        lambda: tf.fill(tf.shape(image[:, :, :1]), tf.constant(255, tf.uint8)),
    )
    mix = tf.cast(colour, tf.float32) * tf.cast(alpha, tf.float32) + 255.0 * (
        255.0 - tf.cast(alpha, tf.float32)
    )
    return tf.cast(tf.round(mix / 255.0), tf.uint8)


def eval_view(
    encoded: tf.Tensor,
    image_size: tuple[int, int],
    config: ReadConfig = ReadConfig(),
    dtype: str = "float32",
    any_format: bool = False,
    stored_shape: tf.Tensor | None = None,
) -> tuple[tf.Tensor, View]:
    """`preprocess_for_eval`'s image and the view of the source image it shows: of the build's
    JPEGs, or (`any_format`) of any file `decode_as_stored` reads. `stored_shape`: the
    record's [height, width] (`verify` checks them against the pixels), which picks the DCT
    scale; else the JPEG's header does."""
    dtype = output_dtype(dtype)
    fraction = config.eval_central_crop
    jpeg = functools.partial(
        decode_for_output,
        image_size=image_size,
        central_crop=fraction,
        scaling=config.dct_scaling,
        shape=stored_shape,
    )
    image = decode_as_stored(encoded, jpeg) if any_format else jpeg(encoded)
    shape = tf.shape(image)
    if fraction < 1.0:
        window = central_window(shape, fraction)
        image = tf.slice(image, tf.concat([window[:2], [0]], 0), tf.concat([window[2:], [-1]], 0))
    else:
        window = tf.stack([0, 0, shape[0], shape[1]])
    image = tf.image.resize(image, image_size, method="bilinear", antialias=False)
    return _finish(image, config, dtype), View(shape[:2], window, tf.constant(False))


def labelled_boxes(boxes: tf.Tensor, classes: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
    """The [N, 4] `boxes` whose `classes` [N] are the image's `label`, or all of them where
    none is. The build labels an image by its largest box in pixels, the first of equals;
    ranked by their stored float32 fractions, another class's box of the same pixel area
    often comes first (a quarter of such pairs), and the training crop kept that one and
    could cut the labelled object out. Among the label's boxes any is of the right class."""
    mine = tf.equal(tf.cast(classes, tf.int64), tf.cast(label, tf.int64))
    return tf.cond(tf.reduce_any(mine), lambda: tf.boolean_mask(boxes, mine), lambda: boxes)


def main_object_box(boxes: tf.Tensor) -> tf.Tensor:
    """The largest [ymin, xmin, ymax, xmax] box of [N, 4] as [1, 1, 4]; the whole image if N = 0.
    (Of a labelled image's boxes, pass the label's: `labelled_boxes`.)"""
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    whole = tf.constant([[0.0, 0.0, 1.0, 1.0]])
    box = tf.cond(
        tf.shape(boxes)[0] > 0,
        lambda: tf.gather(boxes, tf.argmax(areas))[None, :],
        lambda: whole,
    )
    return tf.reshape(box, [1, 1, 4])


def preprocess_for_train(
    encoded: tf.Tensor,
    boxes: tf.Tensor | None,
    image_size: int | tuple[int, int],
    seed: tf.Tensor | int,
    config: ReadConfig = ReadConfig(),
    dtype: str = "float32",
) -> tf.Tensor:
    """JPEG bytes → [H, W, 3] with a random crop decoded directly (fused), and a flip; float32
    in `config.value_range` or uint8 pixels, as `preprocess_for_eval`. Without
    `config.random_crop`, any file `preprocess_for_eval` reads, resized whole, and flipped.

    The crop keeps at least `config.min_object_covered` of the main object (the largest box), so
    the label stays true; images without boxes (`boxes` [0, 4], or None) crop anywhere
    (Inception-style): [N, 4] relative (ymin, xmin, ymax, xmax), a list, an array or a tensor.
    `image_size` as for `preprocess_for_eval`. `seed` is a stateless [2] integer seed, or an
    int (taken as [seed, 0]).
    """
    boxes = _checked_boxes(boxes)
    if is_int(seed):
        seed = tf.constant([int(seed), 0], tf.int64)
    size = checked_image_size(image_size)
    return train_view(encoded, boxes, size, seed, config, dtype, any_format=True)[0]


def _checked_boxes(boxes) -> tf.Tensor:
    """`preprocess_for_train`'s boxes as float32 [N, 4] (None or [] as none); TypeError or
    ValueError naming the argument (a list failed inside TensorFlow's indexing, float64 in a
    kernel's dtype check)."""
    if boxes is None or (isinstance(boxes, (list, tuple)) and not boxes):
        return tf.zeros([0, 4], tf.float32)
    try:
        boxes = tf.cast(tf.convert_to_tensor(boxes), tf.float32)
    except (TypeError, ValueError, tf.errors.UnimplementedError) as error:
        raise TypeError(f"boxes must be numbers, [N, 4], not {boxes!r}") from error
    if boxes.shape.rank not in (None, 2) or (boxes.shape.rank and boxes.shape[-1] not in (None, 4)):
        raise ValueError(
            "boxes must be [N, 4]: relative (ymin, xmin, ymax, xmax), one row an object, not "
            f"of shape {boxes.shape}"
        )
    return boxes


def train_view(
    encoded: tf.Tensor,
    boxes: tf.Tensor,
    image_size: tuple[int, int],
    seed: tf.Tensor,
    config: ReadConfig = ReadConfig(),
    dtype: str = "float32",
    any_format: bool = False,
    box_check: Callable[[tf.Tensor], tf.Tensor] | None = None,
) -> tuple[tf.Tensor, View]:
    """`preprocess_for_train`'s image and the view of the source image it shows.

    Without `config.random_crop` the view is the evaluation one (of any format `any_format`),
    flipped with `seed` itself. `box_check` (the loader's) checks the crop's box, `[1, 1, 4]`.
    """
    dtype = output_dtype(dtype)
    if not config.random_crop:
        image, view = eval_view(encoded, image_size, config, dtype, any_format=any_format)
        return _random_flip(image, view, seed, config)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    shape = tf.io.extract_jpeg_shape(encoded)
    main_box = main_object_box(boxes)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=box_check(main_box) if box_check else main_box,
        seed=crop_seed,
        min_object_covered=config.min_object_covered,
        aspect_ratio_range=config.crop_aspect_ratio_range,
        area_range=config.crop_area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    window = tf.concat([begin[:2], size[:2]], 0)
    image, shape, window = decode_window(encoded, shape[:2], window, image_size, config.dct_scaling)
    image = tf.image.resize(image, image_size, method="bilinear", antialias=False)
    image, view = _random_flip(image, View(shape, window, tf.constant(False)), flip_seed, config)
    return _finish(image, config, dtype), view


def _random_flip(image, view: View, seed, config: ReadConfig):
    """`tf.image.stateless_random_flip_left_right`'s draw and flip, also recorded in the view."""
    if not config.random_flip:
        return image, view
    flipped = tf.random.stateless_uniform([], seed=seed, minval=0, maxval=1.0) < 0.5
    image = tf.cond(flipped, lambda: tf.reverse(image, [1]), lambda: image)
    return image, view._replace(flipped=flipped)


def view_boxes(boxes: tf.Tensor, objects: tf.Tensor, view: View) -> tuple[tf.Tensor, tf.Tensor]:
    """Boxes of the source image ([N, 4] relative ymin, xmin, ymax, xmax) as the view shows them.

    Boxes are moved into the window and clipped to it; those left with no area (they fell out
    of the crop) are dropped with their rows of `objects` ([N, ...]: classes, flags); a flip
    mirrors the rest.
    """
    source = tf.cast(tf.tile(view.source_shape, [2]), tf.float32)
    window = tf.cast(view.window, tf.float32)
    origin = tf.tile(window[:2], [2]) / source
    extent = tf.tile(window[2:], [2]) / source
    moved = tf.clip_by_value((boxes - origin) / extent, 0.0, 1.0)
    keep = (moved[:, 2] > moved[:, 0]) & (moved[:, 3] > moved[:, 1])
    moved, objects = tf.boolean_mask(moved, keep), tf.boolean_mask(objects, keep)
    ymin, xmin, ymax, xmax = tf.unstack(moved, num=4, axis=1)
    mirrored = tf.stack([ymin, 1.0 - xmax, ymax, 1.0 - xmin], axis=1)
    moved = tf.cond(view.flipped, lambda: mirrored, lambda: moved)
    return moved, objects


def normalization_layer(config: ReadConfig = ReadConfig()):
    """The Keras layer that maps uint8 batches (`load_dataset(..., dtype="uint8")`) to what the
    float32 path yields: `config.value_range`, to within rounding (half a level).

    Put it first in the model, so the scaling runs on the accelerator and the host sends it a
    quarter of the bytes: `keras.Sequential([normalization_layer(), backbone])`.
    """
    import keras

    from loaders.config import ReadConfig

    if not isinstance(config, ReadConfig):
        raise TypeError(
            f"normalization_layer takes the loader's ReadConfig (its value_range), not "
            f"{config!r}: normalization_layer(ReadConfig(value_range=(-1, 1))), say"
        )
    low, high = config.value_range
    return keras.layers.Rescaling(scale=(high - low) / 255.0, offset=low, name="normalization")
