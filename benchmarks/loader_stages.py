"""Where the loader's CPU goes: CPU ms per image, stage by stage, on one build.

    python -m benchmarks.loader_stages bench_data/out8k [--images 4000] [--repeats 3]

Each row is a tf.data pipeline over the same records, one stage longer than the row above, run
to the end (all in this process, in alternating rounds; medians). A stage's cost is its row
minus the row above:

  read + CRC        TFRecordDataset over the split's shards (it checks every record's CRC)
  + parse           tf.io.parse_single_example of the image bytes and the label
  + decode          full JPEG decode (libjpeg-turbo, INTEGER_FAST as the loader)
  + resize          bilinear resize to --image_size, float32
  + batch           batch of --batch_size
  ours (eval)       load_dataset(training=False): the same, plus the record guard, the label
                    and the value scaling
  ours (eval), uint8  load_dataset(..., dtype="uint8")
  ours (train), ...   load_dataset(training=True): + shuffle, fused random crop, flip
  decode at 1/2     the `+ decode` row with libjpeg's DCT-domain scaling (`ratio=2`): what
                    decoding at half size would save where stored images are >= 2x the output

CPU time is the whole process's (user + system, every thread), so tf.data's own overhead is in
every row; each row is measured by `loader_benchmark.images_per_second` (after its warm-up).
Compare two builds of one tree (e.g. `--image_policy original` and `shorter_side
256`) to see what storing images pre-resized saves the loader.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from benchmarks.loader_benchmark import images_per_second
from benchmarks.measure import built_dataset
from loaders import load_dataset
from schemas import features as F

AUTOTUNE = tf.data.AUTOTUNE


def stage_pipelines(files, image_size, batch_size, images) -> dict:
    """name → a function making the pipeline of that row."""
    spec = {
        F.ENCODED: tf.io.FixedLenFeature([], tf.string),
        F.LABEL: tf.io.FixedLenFeature([], tf.int64),
    }

    def read():
        return tf.data.TFRecordDataset(files, num_parallel_reads=AUTOTUNE).take(images)

    def parsed():
        return read().map(lambda r: tf.io.parse_single_example(r, spec), AUTOTUNE)

    def decoded(ratio=1):
        return parsed().map(
            lambda p: tf.io.decode_jpeg(
                p[F.ENCODED], channels=3, ratio=ratio, dct_method="INTEGER_FAST"
            ),
            AUTOTUNE,
        )

    def resized():
        return decoded().map(lambda image: tf.image.resize(image, image_size), AUTOTUNE)

    return {
        "read + CRC": read,
        "+ parse": parsed,
        "+ decode": decoded,
        "+ resize": resized,
        "+ batch": lambda: resized().batch(batch_size),
        "decode at 1/2 (DCT scaling)": lambda: decoded(ratio=2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir")
    parser.add_argument("--split", default="train")
    parser.add_argument("--images", type=int, default=4000, help="records per pass")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    info = built_dataset(parser, args.data_dir)
    images = min(args.images, info.split(args.split).num_examples)
    size = (args.image_size, args.image_size)
    files = info.shard_paths(args.split)
    pipelines = stage_pipelines(files, size, args.batch_size, images)
    batches = -(-images // args.batch_size)
    for training in (False, True):
        for dtype in ("float32", "uint8"):
            name = f"ours ({'train' if training else 'eval'})" + (
                ", uint8" if dtype == "uint8" else ""
            )
            pipelines[name] = lambda dtype=dtype, training=training: load_dataset(
                args.data_dir,
                args.split,
                batch_size=args.batch_size,
                image_size=size,
                dtype=dtype,
                training=training,
                seed=0,
            ).take(batches)
    # Stage rows yield images (the "+ batch" row, batches); `ours` rows yield batches.
    per_element = {
        name: args.batch_size if name == "+ batch" or name.startswith("ours") else 1
        for name in pipelines
    }
    runs = {name: [] for name in pipelines}
    for _ in range(args.repeats):  # alternating rounds, after images_per_second's warm-up
        for name, make in pipelines.items():
            per = per_element[name]
            runs[name].append(images_per_second(make().repeat(), max(1, images // per), per))
    print(
        f"{args.data_dir} {args.split}: {images} images, {size[0]}x{size[1]}, "
        f"medians of {args.repeats} rounds, {os.cpu_count()} cores"
    )
    print("| pipeline | CPU ms / image | stage's CPU ms / image | images/s |")
    print("|---|---|---|---|")
    previous = 0.0
    for name, measured in runs.items():
        rate = statistics.median(r for r, _ in measured)
        ms = statistics.median(m for _, m in measured)
        stage = "-"
        if name.startswith(("read", "+")):  # one stage longer than the row above
            stage, previous = f"{ms - previous:.3f}", ms
        print(f"| {name} | {ms:.3f} | {stage} | {rate:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
