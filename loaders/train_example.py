"""Train a small Keras CNN on a build, straight from `load_dataset`.

    python -m loaders.train_example OUT_DIR [--epochs 8 --image_size 64 --batch_size 32]

This is what `run_local.sh` runs on the bundled sample, and the proof that images and labels stay
aligned through shuffle, sharding, encoding and loading: misaligned labels cannot be learned.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import keras

from loaders.config import ReadConfig
from loaders.dataset import load_dataset
from loaders.info import CorruptDatasetError, IncompleteDatasetError

# The sample's objects fill 45-70% of the shorter side: crops keep most of the main object.
SAMPLE_READ_CONFIG = ReadConfig(crop_area_range=(0.5, 1.0), min_object_covered=0.9)


def small_cnn(num_outputs: int, image_size: tuple[int, int]) -> keras.Model:
    """A few conv blocks and global pooling: enough for the sample, fast on 2 CPU cores."""
    inputs = keras.Input((*image_size, 3))
    x = inputs
    # BatchNorm momentum 0.9: a few hundred steps must be enough for its moving statistics.
    for filters in (16, 32, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_outputs, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def train(
    data_dir: str,
    *,
    epochs: int = 8,
    batch_size: int = 32,
    image_size: tuple[int, int] = (64, 64),
    seed: int = 0,
    verbose: int | str = "auto",
) -> dict[str, list[float]]:
    """Trains on the train split, validates on the validation split; returns Keras' history."""
    keras.utils.set_random_seed(seed)
    train_ds = load_dataset(
        data_dir,
        "train",
        batch_size=batch_size,
        image_size=image_size,
        training=True,
        seed=seed,
        config=SAMPLE_READ_CONFIG,
    )
    val_ds = load_dataset(data_dir, "validation", batch_size=batch_size, image_size=image_size)
    # One output per one-hot column the loader gives: the classes, and background only when
    # the build has images labelled background (the sample's negatives).
    model = small_cnn(len(train_ds.class_names), image_size)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    # The dataset shuffles itself (files per epoch, then a buffer); Keras must not try to.
    history = model.fit(
        train_ds, validation_data=val_ds, epochs=epochs, verbose=verbose, shuffle=False
    )
    return history.history


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", help="a build's output directory")
    parser.add_argument("--epochs", type=int, default=8, help="default 8")
    parser.add_argument("--batch_size", type=int, default=32, help="default 32")
    parser.add_argument("--image_size", type=int, default=64, help="square side (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument(
        "--min_accuracy", type=float, default=0.0, help="Exit 1 below this validation accuracy."
    )
    args = parser.parse_args(argv)
    try:
        history = train(
            args.data_dir,
            epochs=args.epochs,
            batch_size=args.batch_size,
            image_size=(args.image_size, args.image_size),
            seed=args.seed,
            verbose=2,
        )
    except (IncompleteDatasetError, CorruptDatasetError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyError as error:  # a split the build lacks (dataset_info's message)
        if "has no split" not in str(error):
            raise
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 2
    accuracy = history["val_accuracy"][-1]
    print(f"validation accuracy: {accuracy:.3f} (Keras {keras.backend.backend()} backend)")
    if accuracy < args.min_accuracy:
        print(f"error: validation accuracy {accuracy:.3f} is below {args.min_accuracy}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
