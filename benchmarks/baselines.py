"""The builds a user would write instead, doing the same work as ours, for same-run comparisons.

    python -m benchmarks.baselines naive    TREE OUT [--resize]   # one Python loop
    python -m benchmarks.baselines nproc    TREE OUT [--resize] [--processes N]  # N processes
    python -m benchmarks.baselines beam_gbk TREE OUT [--resize]   # Beam, image bytes shuffled
    python -m benchmarks.baselines beam_gbk_defaults TREE OUT [--resize]  # same, 1 worker
    python -m benchmarks.baselines limit    TREE OUT [--resize] [--processes N]  # image work only

Each reads every image of an ILSVRC-DET train tree with its XML, fully decodes it (validation),
keeps valid RGB JPEG bytes or converts/resizes with Pillow, labels it by its largest box, builds a
`tf.train.Example` and writes 16 TFRecord shards (TensorFlow's writer, as such scripts do).

`nproc` is the hand-written N-process writer (default 2): process w writes shards w, w + N, ...
of 16, from every N-th image. `limit` is not a build: N processes (default 2) load their share of
the image bytes into memory, wait for each other, then only decode (pass-through) or decode +
resize + re-encode (--resize) with Pillow, the same calls and settings as the builds; it prints
`work_seconds=`, the time of that work alone. No build that decodes at full resolution with
Pillow on N cores can beat it.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NUM_SHARDS = 16


def list_tree(tree: str) -> list[tuple[str, str | None]]:
    images = os.path.join(tree, "Data/DET/train")
    annotations = os.path.join(tree, "Annotations/DET/train")
    pairs = []
    for directory, _, names in os.walk(images):
        for name in sorted(names):
            relative = os.path.relpath(os.path.join(directory, name), images)
            xml = os.path.join(annotations, os.path.splitext(relative)[0] + ".xml")
            pairs.append((os.path.join(directory, name), xml if os.path.exists(xml) else None))
    return sorted(pairs)


def encode(pair: tuple[str, str | None], resize: bool) -> bytes:
    """One serialised tf.train.Example, or b"" for an image that fails validation."""
    import tensorflow as tf
    from lxml import etree
    from PIL import Image

    image_path, xml_path = pair
    with open(image_path, "rb") as f:
        data = f.read()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except OSError:
        return b""
    width = image.width
    if resize or image.format != "JPEG" or image.mode != "RGB":
        data = resized(image, resize)
    label, boxes = "background", []
    if xml_path:
        root = etree.parse(xml_path, etree.XMLParser(resolve_entities=False, no_network=True))
        best = -1.0
        for obj in root.findall("object"):
            box = [float(obj.findtext(f"bndbox/{k}")) for k in ("xmin", "ymin", "xmax", "ymax")]
            boxes.append(box)
            area = (box[2] - box[0]) * (box[3] - box[1])
            if area > best:
                best, label = area, obj.findtext("name")
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
        "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[label.encode()])),
        "image/object/bbox/xmin": tf.train.Feature(
            float_list=tf.train.FloatList(value=[b[0] / width for b in boxes])
        ),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shards(pairs, out: str, shard_ids: list[int], resize: bool) -> None:
    import tensorflow as tf

    writers = {
        i: tf.io.TFRecordWriter(os.path.join(out, f"train-{i:05d}-of-{NUM_SHARDS:05d}.tfrecord"))
        for i in shard_ids
    }
    for index, pair in enumerate(pairs):
        record = encode(pair, resize)
        if record:
            writers[shard_ids[index % len(shard_ids)]].write(record)
    for writer in writers.values():
        writer.close()


def naive(tree: str, out: str, resize: bool) -> None:
    write_shards(list_tree(tree), out, list(range(NUM_SHARDS)), resize)


# The pools below spawn fresh interpreters, which unpickle `_worker` and `_limit_worker` by
# module name: each re-imports this module the way the parent runs it (`python -m
# benchmarks.baselines`), through the sys.path that spawn hands over from the parent. Beam's
# workers get `encode` pickled by value, as a function of `__main__`. So no sys.path edit is
# needed, only `-m` from the repository root.
def _worker(args) -> None:
    pairs, out, shard_ids, resize = args
    write_shards(pairs, out, shard_ids, resize)


def nproc(tree: str, out: str, resize: bool, processes: int = 2) -> None:
    pairs, n = list_tree(tree), processes
    jobs = [(pairs[w::n], out, list(range(w, NUM_SHARDS, n)), resize) for w in range(n)]
    with multiprocessing.get_context("spawn").Pool(n) as pool:
        pool.map(_worker, jobs, chunksize=1)


def resized(image, resize: bool):
    """The baselines' image work after decoding: RGB, shorter side to 256, JPEG quality 95."""
    from PIL import Image

    image = image.convert("RGB")
    if resize:
        scale = 256 / min(image.size)
        size = (round(image.width * scale), round(image.height * scale))
        image = image.resize(size, Image.BICUBIC)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95)
    return out.getvalue()


_barrier = None


def _limit_init(barrier) -> None:
    global _barrier
    _barrier = barrier


def _limit_worker(args) -> tuple[float, float]:
    import time

    from PIL import Image

    paths, resize = args
    blobs = []
    for path in paths:
        with open(path, "rb") as f:
            blobs.append(f.read())
    _barrier.wait()
    start = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
    for data in blobs:
        image = Image.open(io.BytesIO(data))
        image.load()
        if resize:
            resized(image, resize)
    return start, time.perf_counter()


def limit(tree: str, out: str, resize: bool, processes: int = 2) -> None:
    paths, n = [image for image, _ in list_tree(tree)], processes
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(n)
    with context.Pool(n, initializer=_limit_init, initargs=(barrier,)) as pool:
        windows = pool.map(_limit_worker, [(paths[w::n], resize) for w in range(n)], chunksize=1)
    seconds = max(end for _, end in windows) - min(start for start, _ in windows)
    print(f"work_seconds={seconds:.3f}")


def beam_gbk(tree: str, out: str, resize: bool, processes: int = 2, defaults: bool = False) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    # FnApiRunner is what DirectRunner runs batch pipelines on offline; named so that no machine
    # runs Prism instead (see beam_pipeline.runners.local.LOCAL_RUNNER).
    flags = ["--direct_running_mode", "multi_processing", "--direct_num_workers", str(processes)]
    options = PipelineOptions(["--runner", "FnApiRunner", *([] if defaults else flags)])
    with beam.Pipeline(options=options) as pipeline:
        (
            pipeline
            | "List" >> beam.Create(list_tree(tree))
            | "Spread" >> beam.Reshuffle()
            | "Encode" >> beam.Map(encode, resize=resize)
            | "DropInvalid" >> beam.Filter(bool)
            | "ShufflePixels" >> beam.Reshuffle()  # the encoded images go through the shuffle
            | "Write" >> beam.io.WriteToTFRecord(os.path.join(out, "train"), num_shards=NUM_SHARDS)
        )


# Each kind as (tree, out, resize, processes); the one-process kinds take no processes.
KINDS = {
    "naive": lambda tree, out, resize, processes: naive(tree, out, resize),
    "nproc": nproc,
    "beam_gbk": beam_gbk,
    "beam_gbk_defaults": lambda tree, out, resize, processes: beam_gbk(tree, out, resize, 1, True),
    "limit": limit,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=list(KINDS))
    parser.add_argument("tree")
    parser.add_argument("out")
    parser.add_argument("--resize", action="store_true")
    parser.add_argument(
        "--processes", type=int, default=2, help="nproc, limit, beam_gbk: processes (default 2)"
    )
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    KINDS[args.kind](args.tree, args.out, args.resize, args.processes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
