"""Loader throughput at 224x224: our tf.data pipeline against the decode limit, and model.fit.

    python -m beam_pipeline --input_dir bench_data/tree8k --output_dir bench_data/out8k \\
        --splits train --num_shards 16
    python -m benchmarks.loader_benchmark bench_data/out8k --tree bench_data/tree8k

Rows (images/s and CPU ms per image, measured after a warm-up, all in one process so they share
the machine state; each loop runs one epoch of the split by default, so every row sees the same
images):
  decode limit       tf.data over the split's own JPEG bytes, all held in memory: decode +
                     resize + batch (the records are read once, before timing)
  ours (eval)        load_dataset(training=False): read shards, parse, decode, resize, batch
  ours (train)       load_dataset(training=True): + shuffles, fused random crop, flip
  ... uint8          the same with dtype="uint8" (pixels; no float conversion on the host)
  ... detection      training, uint8, label_mode="detection": every box follows crop and flip
  ... dct_scaling    ReadConfig(dct_scaling=True): large JPEGs decoded at 1/2, 1/4 or 1/8
  ... cached         ReadConfig(cache=True), after its first epoch (run before timing):
                     evaluation's decoded images, or training's records, from memory
  baselines          with --tree, the loaders people write instead, over the tree's JPEG files
                     (benchmarks.loader_baselines): a Keras PyDataset with Pillow,
                     from_generator + py_function with Pillow, tf.data over the raw files
  fit ...            model.fit of a small CNN fed by ours (train), by ours in uint8 (the same
                     CNN with `normalization_layer()` first), by the decode limit, by the
                     Keras PyDataset (with --tree) and by one cached batch (the model's own
                     speed): medians of alternating runs (--fit_repeats)
On a CPU-only machine the model and the decoder share the same cores: "fed by ours" close to
"fed by the decode limit" means the pipeline adds nothing beyond the decoding it must do.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from benchmarks import loader_baselines
from benchmarks.measure import built_dataset
from loaders import ReadConfig, dataset_info, load_dataset, normalization_layer
from schemas import features as F

SIZE = (224, 224)


def images_per_second(batches, count: int, batch_size: int, warmup: int = 10):
    """(images/s, CPU ms per image) of a fresh iterator over `count` batches after `warmup`.

    The CPU time is the whole process's (every tf.data and worker thread): on a shared machine
    it varies less than the wall-clock rate, because time stolen by neighbours is not in it.
    """
    iterator = iter(batches)
    try:
        for _ in range(warmup):
            next(iterator)
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(count):
            next(iterator)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        return count * batch_size / seconds, 1000 * cpu / (count * batch_size)
    finally:
        if hasattr(iterator, "close"):
            iterator.close()


def consumer_rates(loops: dict, count: int, batch_size: int, repeats: int) -> dict:
    """Each loader's (rate, CPU ms per image) in alternating rounds (no order bias)."""
    runs = {name: [] for name in loops}
    for _ in range(repeats):
        for name, make in loops.items():
            runs[name].append(images_per_second(make(), count, batch_size))
    return runs


def decode_limit(data_dir: str, batch_size: int, size=SIZE) -> tf.data.Dataset:
    """The split's own JPEG bytes held in memory: only decode + resize + batch remain."""
    info = dataset_info(data_dir)
    records = tf.data.TFRecordDataset(info.shard_paths("train"))
    spec = {F.ENCODED: tf.io.FixedLenFeature([], tf.string)}
    encoded = [tf.io.parse_single_example(r, spec)[F.ENCODED].numpy() for r in records]

    def decode(data):
        image = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_FAST")
        return tf.cast(tf.image.resize(image, size), tf.float32) / 255.0

    return (
        tf.data.Dataset.from_tensor_slices(encoded)
        .repeat()
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def small_cnn(num_outputs: int, uint8: bool = False, size=SIZE) -> keras.Model:
    """A small CNN; with `uint8`, it takes pixels and starts with `normalization_layer()`."""
    inputs = keras.Input((*size, 3), dtype="uint8" if uint8 else "float32")
    x = normalization_layer()(inputs) if uint8 else inputs
    x = keras.layers.Conv2D(16, 3, strides=2, activation="relu")(x)
    x = keras.layers.Conv2D(32, 3, strides=2, activation="relu")(x)
    x = keras.layers.Conv2D(64, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    # A float32 softmax, so the model also trains under a mixed-precision policy.
    outputs = keras.layers.Dense(num_outputs, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile("adam", "categorical_crossentropy")
    return model


def fit_rate(model: keras.Model, dataset: tf.data.Dataset, steps: int, batch_size: int) -> float:
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    return steps * batch_size / (time.perf_counter() - start)


def fit_rates(model, datasets: dict, steps: int, batch_size: int, repeats: int = 3) -> dict:
    """Median rate per dataset over alternating runs, after warming all up (no order bias)."""
    for dataset in datasets.values():
        fit_rate(model, dataset, 3, batch_size)
    runs = {name: [] for name in datasets}
    for _ in range(repeats):
        for name, dataset in datasets.items():
            runs[name].append(fit_rate(model, dataset, steps, batch_size))
    return {name: statistics.median(rates) for name, rates in runs.items()}


def baseline_feeds(
    tree: str, num_outputs: int, b: int, size=SIZE
) -> tuple[dict, keras.utils.PyDataset]:
    """The baseline loaders over the tree's JPEG files, and the PyDataset for model.fit."""
    files = loader_baselines.image_files(tree)
    classes = np.random.default_rng(0).integers(0, num_outputs, len(files))
    labels = np.eye(num_outputs, dtype=np.float32)[classes]
    loops = {
        "baseline: Keras PyDataset + Pillow, defaults (workers=1)": (
            lambda: loader_baselines.keras_pydataset_batches(files, labels, b, size)
        ),
        "baseline: Keras PyDataset + Pillow, workers=2 (threads)": (
            lambda: loader_baselines.keras_pydataset_batches(files, labels, b, size, workers=2)
        ),
        "baseline: from_generator + py_function (Pillow)": (
            lambda: loader_baselines.generator_py_function(files, labels, b, size)
        ),
        "baseline: tf.data over the raw JPEG files": (
            lambda: loader_baselines.tfdata_raw_files(files, labels, b, size)
        ),
    }
    return loops, loader_baselines.PillowPyDataset(files, labels, b, size, workers=2)


def print_table(title: str, rows: dict, columns: dict) -> None:
    print(f"| {title} | images/s | " + " | ".join(columns) + " |")
    print("|---" * (2 + len(columns)) + "|")
    for name, rate in rows.items():
        ratios = " | ".join(f"{ratio(rate):.2f}" for ratio in columns.values())
        print(f"| {name} | {rate:.0f} | {ratios} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir")
    parser.add_argument("--tree", help="the build's source tree: also run the baseline loaders")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument(
        "--batches", type=int, help="batches per measurement (default: one epoch of the split)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds per loader")
    parser.add_argument("--fit_repeats", type=int, default=3, help="alternating model.fit runs")
    parser.add_argument(
        "--image_size", type=int, default=SIZE[0], help="output side (square), default 224"
    )
    args = parser.parse_args()
    size = (args.image_size, args.image_size)
    info = built_dataset(parser, args.data_dir)
    b = args.batch_size
    n = args.batches or info.split("train").num_examples // b
    num_outputs = len(info.class_names)
    split = functools.partial(load_dataset, args.data_dir, "train", batch_size=b, image_size=size)
    train = split(training=True, seed=0)
    train8 = split(training=True, seed=0, dtype="uint8")
    detection = split(training=True, seed=0, dtype="uint8", label_mode="detection")
    in_memory = decode_limit(args.data_dir, b, size)
    scaled = ReadConfig(dct_scaling=True)  # large JPEGs decoded at a DCT scale
    evaluation_scaled = split(config=scaled).repeat()
    train_scaled = split(training=True, seed=0, config=scaled)
    evaluation = split().repeat()
    evaluation8 = split(dtype="uint8").repeat()
    # ReadConfig(cache=True): epochs after the first, from memory (filled here, once).
    kept = ReadConfig(cache=True)
    cached = {
        "ours (eval), cached": split(config=kept),
        "ours (train), cached": split(training=True, seed=0, config=kept),
    }
    for dataset in cached.values():
        for _ in dataset:
            pass
    loops = {
        "decode limit (bytes in memory)": lambda: in_memory,
        "ours (eval)": lambda: evaluation,
        "ours (train)": lambda: train.repeat(),
        "ours (eval), dct_scaling=True": lambda: evaluation_scaled,
        "ours (train), dct_scaling=True": lambda: train_scaled.repeat(),
        "ours (eval), uint8": lambda: evaluation8,
        "ours (train), uint8": lambda: train8.repeat(),
        "ours (train), uint8, detection": lambda: detection.repeat(),
        **{name: (lambda d=dataset: d.repeat()) for name, dataset in cached.items()},
    }
    feeds = {
        "fit small CNN, fed by ours (train)": train.repeat(),
        "fit small CNN, fed by the decode limit": in_memory.map(
            lambda x: (x, tf.one_hot(tf.zeros([b], tf.int32), num_outputs))
        ),
    }
    if args.tree:
        baseline_loops, pydataset = baseline_feeds(args.tree, num_outputs, b, size)
        loops.update(baseline_loops)
        feeds["fit small CNN, fed by the Keras PyDataset (workers=2)"] = pydataset
    feeds["fit small CNN, one cached batch"] = tf.data.Dataset.from_tensors(
        next(iter(train))
    ).repeat()

    runs = consumer_rates(loops, n, b, args.repeats)
    rows = {name: statistics.median(rate for rate, _ in got) for name, got in runs.items()}
    cpu = {name: statistics.median(ms for _, ms in got) for name, got in runs.items()}
    limit_name = "decode limit (bytes in memory)"
    limit, ours = rows[limit_name], rows["ours (train)"]
    print_table(
        f"loader into a consumer loop, {size[0]}x{size[1]}, batch {b}, {n} batches, "
        f"medians of {args.repeats} rounds",
        rows,
        {"vs decode limit": lambda r: r / limit, "ours (train) / this": lambda r: ours / r},
    )
    print()
    print("| CPU time per image (whole process) | ms | decode limit's / this |")
    print("|---|---|---|")
    for name, ms in cpu.items():
        print(f"| {name} | {ms:.2f} | {cpu[limit_name] / ms:.2f} |")
    print()
    for mode in ("eval", "train"):
        print(
            f"ours ({mode}), uint8 / float32: "
            f"{rows[f'ours ({mode}), uint8'] / rows[f'ours ({mode})']:.2f} (images/s), "
            f"{cpu[f'ours ({mode})'] / cpu[f'ours ({mode}), uint8']:.2f} (CPU per image, inverse)"
        )
    for mode in ("eval", "train"):
        whole, less = cpu[f"ours ({mode})"], cpu[f"ours ({mode}), dct_scaling=True"]
        print(f"ours ({mode}), DCT-scaled decode: CPU per image {whole / less:.2f}x less")
    for name in ("ours (eval)", "ours (train)"):
        ratios = sorted(
            rate / limit_rate
            for (rate, _), (limit_rate, _) in zip(runs[name], runs[limit_name], strict=True)
        )
        print(f"{name} / decode limit, round by round: " + " ".join(f"{x:.2f}" for x in ratios))
    steps = max(1, n // 2)
    fits = fit_rates(small_cnn(num_outputs, size=size), feeds, steps, b, args.fit_repeats)
    fits.update(
        fit_rates(
            small_cnn(num_outputs, uint8=True, size=size),
            {"fit small CNN + normalization layer, fed by ours (train, uint8)": train8.repeat()},
            steps,
            b,
            args.fit_repeats,
        )
    )
    cached = fits["fit small CNN, one cached batch"]
    print()
    print_table("model.fit, small CNN", fits, {"vs cached batch": lambda r: r / cached})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
