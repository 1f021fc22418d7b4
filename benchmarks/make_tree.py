"""Generate an ImageNet-like ILSVRC-DET tree for benchmarks.

    python -m benchmarks.make_tree bench_data/tree8k --num_images 8000

Images are random crops of real photographs (the corpus photos in tests/data), resized so the
longer side is 300-500 px (mostly 500, like ImageNet; `--long_side 4000`: 2400-4000, like
phones' photos), with sensor-like noise and quality 95, so that files are about as large as
ImageNet's and decoding costs what it would on ImageNet (the
mean size is printed). 2% are grayscale, 5% have no XML and 3% an XML without objects
(negatives); the rest have 1-3 boxes of 200 synset-like classes. Deterministic per seed and per
image index, so a 2k tree is exactly the first 2k images of the 8k one. With `--distinct`, each
image is a picture of its own instead (random smooth colour fields and rectangles, with the same
noise, sizes and annotations): a tree with no near copies, to measure `--duplicates` where copies
are as rare as in a real collection.
"""

from __future__ import annotations

import argparse
import glob
import io
import multiprocessing
import os
import pathlib

import numpy as np
from PIL import Image

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.runners.machine import available_cores

HERE = pathlib.Path(__file__).resolve().parent
PHOTOS = sorted(glob.glob(str(HERE.parent / "tests/data/corpus/images/tfrecorder/*/*/*.jpg")))
NUM_CLASSES = 200
_sources: list[Image.Image] = []


def _load_sources() -> None:
    if not _sources:
        _sources.extend(Image.open(p).convert("RGB") for p in PHOTOS)


def _synset(index: int) -> str:
    return f"n{90000000 + index:08d}"


def _distinct_source(rng: np.random.Generator) -> Image.Image:
    """A picture of its own (`--distinct`): a random smooth colour field (8x6 random colours,
    bicubic) with a few random rectangles, so that no two images of a tree are near copies."""
    field = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    picture = Image.fromarray(field).resize((640, 480), Image.Resampling.BICUBIC)
    pixels = np.asarray(picture).copy()
    for _ in range(int(rng.integers(2, 6))):
        x, y = int(rng.integers(0, 560)), int(rng.integers(0, 400))
        pixels[y : y + int(rng.integers(40, 200)), x : x + int(rng.integers(40, 200))] = (
            rng.integers(0, 256, 3)
        )
    return Image.fromarray(pixels)


def make_image(args: tuple) -> int:
    """Writes image `index` (and its XML) under `root`; returns the JPEG size in bytes. A
    fourth value True makes it a picture of its own (`--distinct`); a fifth is the longer
    side's most (`--long_side`, 500)."""
    root, index, seed = args[:3]
    distinct = len(args) > 3 and bool(args[3])
    top = int(args[4]) if len(args) > 4 else 500
    _load_sources()
    rng = np.random.default_rng([seed, index])
    source = _distinct_source(rng) if distinct else _sources[index % len(_sources)]
    sw, sh = source.size
    cw, ch = int(sw * rng.uniform(0.5, 1)), int(sh * rng.uniform(0.5, 1))
    x, y = int(rng.integers(0, sw - cw + 1)), int(rng.integers(0, sh - ch + 1))
    long_side = top if rng.random() < 0.7 else int(rng.integers(top * 3 // 5, top))
    if cw >= ch:
        width, height = long_side, max(top * 2 // 5, long_side * ch // cw)
    else:
        width, height = max(top * 2 // 5, long_side * cw // ch), long_side
    image = source.crop((x, y, x + cw, y + ch)).resize((width, height), Image.Resampling.BILINEAR)
    noisy = np.asarray(image, np.int16) + rng.normal(0, 15, (height, width, 3)).astype(np.int16)
    image = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    kind = rng.random()
    if kind < 0.02:
        image = image.convert("L")
    synset = _synset(int(rng.integers(0, NUM_CLASSES)))
    stem = f"ILSVRC2013_train/{synset}/{synset}_{index:06d}"
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95)
    data_path = os.path.join(root, "Data/DET/train", stem + ".JPEG")
    os.makedirs(os.path.dirname(data_path), exist_ok=True)
    with open(data_path, "wb") as f:
        f.write(out.getvalue())
    # Every synset folder has its annotation folder, as in ImageNet's DET (a build refuses a
    # folder without one: a copy that lost its XML), even where all its images are negatives.
    xml_path = os.path.join(root, "Annotations/DET/train", stem + ".xml")
    os.makedirs(os.path.dirname(xml_path), exist_ok=True)
    if kind >= 0.05:  # 5% negatives without XML
        objects = []
        if kind >= 0.08:  # 3% negatives with an empty XML
            for i in range(int(rng.integers(1, 4))):
                name = synset if i == 0 else _synset(int(rng.integers(0, NUM_CLASSES)))
                x0, y0 = int(rng.integers(0, width // 2)), int(rng.integers(0, height // 2))
                x1 = int(rng.integers(x0 + 10, width + 1))
                y1 = int(rng.integers(y0 + 10, height + 1))
                objects.append((name, x0, y0, x1, y1))
        with open(xml_path, "w", encoding="utf-8") as f:
            f.write(voc_xml(objects, (width, height), folder="bench", filename=stem))
    return len(out.getvalue())


def make_tree(
    root: str,
    num_images: int,
    seed: int = 0,
    processes: int = 2,
    distinct: bool = False,
    long_side: int = 500,
) -> list[int]:
    """Writes the tree; returns the JPEG sizes."""
    jobs = [(root, i, seed, distinct, long_side) for i in range(num_images)]
    with multiprocessing.Pool(processes) as pool:
        return pool.map(make_image, jobs, chunksize=64)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--num_images", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--processes", type=int, default=available_cores(), help="default: every core"
    )
    parser.add_argument(
        "--distinct",
        action="store_true",
        help="each image a picture of its own (random colour fields), not a crop of the "
        "corpus photos: a tree without near copies (the photos' crops make 2.7 near pairs an "
        "image at 8,000)",
    )
    parser.add_argument(
        "--long_side",
        type=int,
        default=500,
        help="the longer side of most images (the rest 0.6-1x of it; 500 like ImageNet, "
        "4000 like a phone's photos)",
    )
    args = parser.parse_args()
    sizes = make_tree(
        args.root, args.num_images, args.seed, args.processes, args.distinct, args.long_side
    )
    print(f"{len(sizes)} images, mean {np.mean(sizes) / 1e3:.0f} KB, in {args.root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
