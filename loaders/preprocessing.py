"""Image preprocessing, in TensorFlow ops only (it runs inside tf.data's C++ threads).

`preprocess_for_eval` is what evaluation uses and what inference on a raw JPEG should use, so a
served model sees exactly what it was validated on.
"""

from __future__ import annotations

import tensorflow as tf

from loaders.config import ReadConfig

DTYPES = ("float32", "uint8")


def output_dtype(dtype) -> str:
    """The name "float32" or "uint8" from a name or a dtype; ValueError for any other."""
    try:
        name = tf.as_dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    return name


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
    image_size: tuple[int, int],
    config: ReadConfig = ReadConfig(),
    dtype: str = "float32",
) -> tf.Tensor:
    """JPEG bytes → [H, W, 3]: decode, optional central crop, resize.

    float32 scaled to `config.value_range`, or uint8 pixels (`dtype="uint8"`) for a model that
    starts with `normalization_layer(config)`.
    """
    dtype = output_dtype(dtype)
    image = tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_FAST")
    if config.eval_central_crop < 1.0:
        image = tf.image.central_crop(image, config.eval_central_crop)
    image = tf.image.resize(image, image_size, method="bilinear", antialias=False)
    return _finish(image, config, dtype)


def main_object_box(boxes: tf.Tensor) -> tf.Tensor:
    """The largest [ymin, xmin, ymax, xmax] box of [N, 4] as [1, 1, 4]; the whole image if N = 0."""
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
    boxes: tf.Tensor,
    image_size: tuple[int, int],
    seed: tf.Tensor,
    config: ReadConfig = ReadConfig(),
    dtype: str = "float32",
) -> tf.Tensor:
    """JPEG bytes → [H, W, 3] with a random crop decoded directly (fused), and a flip; float32
    in `config.value_range` or uint8 pixels, as `preprocess_for_eval`.

    The crop keeps at least `config.min_object_covered` of the main object (the largest box), so
    the label stays true; images without boxes crop anywhere (Inception-style).
    """
    dtype = output_dtype(dtype)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    shape = tf.io.extract_jpeg_shape(encoded)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=main_object_box(boxes),
        seed=crop_seed,
        min_object_covered=config.min_object_covered,
        aspect_ratio_range=config.crop_aspect_ratio_range,
        area_range=config.crop_area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    offset_y, offset_x, _ = tf.unstack(begin)
    height, width, _ = tf.unstack(size)
    window = tf.stack([offset_y, offset_x, height, width])
    image = tf.io.decode_and_crop_jpeg(encoded, window, channels=3, dct_method="INTEGER_FAST")
    image = tf.image.resize(image, image_size, method="bilinear", antialias=False)
    if config.random_flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return _finish(image, config, dtype)


def normalization_layer(config: ReadConfig = ReadConfig()):
    """The Keras layer that maps uint8 batches (`load_dataset(..., dtype="uint8")`) to what the
    float32 path yields: `config.value_range`, to within rounding (half a level).

    Put it first in the model, so the scaling runs on the accelerator and the host sends it a
    quarter of the bytes: `keras.Sequential([normalization_layer(), backbone])`.
    """
    import keras

    low, high = config.value_range
    return keras.layers.Rescaling(scale=(high - low) / 255.0, offset=low, name="normalization")
