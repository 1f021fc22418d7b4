"""The loaders people write instead of ours, each reading the original JPEG files of a tree.

  keras_pydataset     a `keras.utils.PyDataset` (the old `Sequence`) that opens each file with
                      Pillow, converts to RGB, resizes and stacks a batch, pulled the way
                      `model.fit` pulls it: with PyDataset's defaults (workers=1: one batch at a
                      time in the training loop's thread) or with Keras's worker pool (threads;
                      Pillow releases the GIL while decoding)
  generator_py_func   `tf.data.Dataset.from_generator` over the file list, then a parallel
                      `tf.py_function` that decodes and resizes with Pillow
  tfdata_raw_files    tf.data over the JPEG files: read_file, decode_jpeg, resize, batch, prefetch
                      (the strongest of the three: no Python per element)

They get the labels for free (a list computed up front), the only work left to them is reading,
decoding and resizing, so they are upper bounds on what such loaders do.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf
from PIL import Image

IMAGE_SUFFIXES = (".jpeg", ".jpg")


def image_files(tree: str) -> list[str]:
    """Every JPEG file under `tree`, sorted (the order the baselines read them in)."""
    return sorted(
        os.path.join(directory, name)
        for directory, _, names in os.walk(tree)
        for name in names
        if name.lower().endswith(IMAGE_SUFFIXES)
    )


def pillow_image(path: str | bytes, size: tuple[int, int]) -> np.ndarray:
    """How such loaders decode: open, convert to RGB, resize (bilinear), scale to [0, 1]."""
    with Image.open(os.fsdecode(path)) as image:
        image = image.convert("RGB").resize(size[::-1], Image.Resampling.BILINEAR)
    return np.asarray(image, dtype=np.float32) / 255.0


class PillowPyDataset(keras.utils.PyDataset):
    def __init__(self, files, labels, batch_size, size, workers=1):
        super().__init__(workers=workers, use_multiprocessing=False, max_queue_size=10)
        self.files, self.labels, self.batch_size, self.size = files, labels, batch_size, size

    def __len__(self):
        return len(self.files) // self.batch_size

    def __getitem__(self, index):
        chunk = slice(index * self.batch_size, (index + 1) * self.batch_size)
        images = np.stack([pillow_image(path, self.size) for path in self.files[chunk]])
        return images, self.labels[chunk]


def keras_pydataset_batches(files, labels, batch_size, size, workers=1):
    """Batches as `model.fit` pulls them (Keras's adapter and worker pool), epoch after epoch."""
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    adapter = PyDatasetAdapter(PillowPyDataset(files, labels, batch_size, size, workers))
    try:
        while True:
            yield from adapter.get_numpy_iterator()
            adapter.on_epoch_end()
    finally:
        adapter.on_epoch_end()  # stops the worker pool when the consumer lets go


def generator_py_function(files, labels, batch_size, size) -> tf.data.Dataset:
    def generate():
        while True:
            yield from zip(files, labels, strict=True)

    def load(path):
        return pillow_image(path.numpy(), size)

    def decode(path, label):
        image = tf.py_function(load, [path], tf.float32)
        image.set_shape((*size, 3))
        return image, label

    signature = (
        tf.TensorSpec((), tf.string),
        tf.TensorSpec(labels.shape[1:], tf.float32),
    )
    return (
        tf.data.Dataset.from_generator(generate, output_signature=signature)
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def tfdata_raw_files(files, labels, batch_size, size) -> tf.data.Dataset:
    def decode(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3, dct_method="INTEGER_FAST")
        return tf.cast(tf.image.resize(image, size), tf.float32) / 255.0, label

    return (
        tf.data.Dataset.from_tensor_slices((files, labels))
        .repeat()
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
