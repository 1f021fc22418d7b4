"""A deterministic, learnable ILSVRC-DET-style sample tree.

    python -m beam_pipeline sample OUT_DIR [--train 1000 --val 250 --seed 0]

Each image shows coloured shapes on a noisy background; an object's class is visible (every
class has its own shape and colour) and its XML box is exactly the drawn shape's extent. Most
images hold one large object; some hold one large and a few small ones (the large one is the
main object); some hold none and are negatives, either without an XML file or with an XML
that has no `<object>`. A model that sees the right label for the right pixels learns this
quickly; one fed misaligned labels stays at chance.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import sys
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from beam_pipeline.arguments import parse_once
from beam_pipeline.core.annotations import voc_xml

CLASSES = ("circle", "cross", "square", "triangle")
_COLOURS = {
    "circle": (220, 40, 40),
    "cross": (240, 200, 30),
    "square": (40, 170, 60),
    "triangle": (40, 80, 220),
}


@dataclasses.dataclass(frozen=True)
class SampleObject:
    name: str
    box: tuple[int, int, int, int]  # xmin, ymin, xmax, ymax in pixels, inclusive of the edge


@dataclasses.dataclass(frozen=True)
class SampleImage:
    """One generated image: where it goes and what it shows (for tests to check against)."""

    split: str
    relative_stem: str
    width: int
    height: int
    objects: tuple[SampleObject, ...]
    has_xml: bool

    @property
    def label(self) -> str | None:
        """Class of the largest object, None for a negative."""
        if not self.objects:
            return None
        areas = [(o.box[2] - o.box[0]) * (o.box[3] - o.box[1]) for o in self.objects]
        return self.objects[int(np.argmax(areas))].name


def _draw_shape(draw: ImageDraw.ImageDraw, name: str, box: tuple[int, int, int, int]) -> None:
    xmin, ymin, xmax, ymax = box
    colour = _COLOURS[name]
    if name == "circle":
        draw.ellipse(box, fill=colour)
    elif name == "square":
        draw.rectangle(box, fill=colour)
    elif name == "triangle":
        draw.polygon([((xmin + xmax) // 2, ymin), (xmax, ymax), (xmin, ymax)], fill=colour)
    else:
        w, h = xmax - xmin, ymax - ymin
        draw.rectangle((xmin + w // 3, ymin, xmax - w // 3, ymax), fill=colour)
        draw.rectangle((xmin, ymin + h // 3, xmax, ymax - h // 3), fill=colour)


def _background(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    base = rng.integers(60, 190, size=3)
    gradient = np.linspace(-30, 30, width)[None, :, None] * rng.choice([-1, 1])
    noise = rng.normal(0, 12, size=(height, width, 3))
    pixels = np.clip(base[None, None, :] + gradient + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


def _random_box(rng, width, height, low, high) -> tuple[int, int, int, int]:
    side = int(min(width, height) * rng.uniform(low, high))
    x = int(rng.integers(0, width - side))
    y = int(rng.integers(0, height - side))
    return x, y, x + side, y + side


def plan_images(split: str, count: int, rng: np.random.Generator) -> list[SampleImage]:
    """The content of `count` images of a split (no pixels yet)."""
    images = []
    for i in range(count):
        width, height = int(rng.integers(120, 200)), int(rng.integers(120, 200))
        kind = rng.random()
        objects = []
        if kind >= 0.15:  # 85% have a main object
            objects.append(
                SampleObject(str(rng.choice(CLASSES)), _random_box(rng, width, height, 0.45, 0.7))
            )
            if kind >= 0.9:  # a few also have small extra objects
                for _ in range(int(rng.integers(1, 3))):
                    objects.append(
                        SampleObject(
                            str(rng.choice(CLASSES)), _random_box(rng, width, height, 0.12, 0.2)
                        )
                    )
        has_xml = bool(objects) or kind >= 0.07  # some negatives have an empty XML, some none
        stem = f"sample_{split}/{split}_{i:06d}" if split == "train" else f"sample_{split}_{i:08d}"
        images.append(SampleImage(split, stem, width, height, tuple(objects), has_xml))
    return images


def render(image: SampleImage, rng: np.random.Generator) -> bytes:
    """JPEG bytes of one planned image."""
    picture = _background(rng, image.width, image.height)
    draw = ImageDraw.Draw(picture)
    for obj in image.objects:
        _draw_shape(draw, obj.name, obj.box)
    out = io.BytesIO()
    picture.save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_tree(
    root: str, num_train: int = 1000, num_val: int = 250, seed: int = 0
) -> list[SampleImage]:
    """Writes the tree under `root` (ROOT/Data/DET/..., ROOT/Annotations/DET/...)."""
    rng = np.random.default_rng(seed)
    images = plan_images("train", num_train, rng) + plan_images("val", num_val, rng)
    for image in images:
        data_path = os.path.join(root, "Data", "DET", image.split, image.relative_stem + ".JPEG")
        os.makedirs(os.path.dirname(data_path), exist_ok=True)
        with open(data_path, "wb") as f:
            f.write(render(image, rng))
        if image.has_xml:
            xml_path = os.path.join(
                root, "Annotations", "DET", image.split, image.relative_stem + ".xml"
            )
            os.makedirs(os.path.dirname(xml_path), exist_ok=True)
            with open(xml_path, "w", encoding="utf-8") as f:
                f.write(
                    voc_xml(
                        [(o.name, *o.box) for o in image.objects],
                        (image.width, image.height),
                        folder=image.split,
                        filename=image.relative_stem,
                    )
                )
    return images


# The most images of a split (a sample is drawn in one process: 99,999,999,999 was taken, and
# drawn on for as long as it was let).
MAX_IMAGES = 1_000_000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline sample", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "output_dir", help="where the tree is written (ROOT/Data, ROOT/Annotations)"
    )
    parser.add_argument("--train", type=int, default=1000, help="train images (default 1000)")
    parser.add_argument("--val", type=int, default=250, help="validation images (default 250)")
    parser.add_argument("--seed", type=int, default=0, help="the drawing's seed (default 0)")
    args = parse_once(parser, argv)
    if problem := _refusal(args):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        images = write_tree(args.output_dir, args.train, args.val, args.seed)
    except OSError as error:
        print(f"error: cannot write the tree to {args.output_dir}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {len(images)} images to {args.output_dir}")
    return 0


def _refusal(args: argparse.Namespace) -> str | None:
    """Why the tree is not written: counts below 1 (0 for --val), or a folder that is not new
    (a tree drawn over another kept its old XML beside the new images)."""
    if not (1 <= args.train <= MAX_IMAGES and 0 <= args.val <= MAX_IMAGES):
        return (
            f"--train takes 1 to {MAX_IMAGES:,} images and --val 0 to {MAX_IMAGES:,}, not "
            f"{args.train}, {args.val}"
        )
    if args.seed < 0:  # (NumPy's seeds: -1 gave its traceback)
        return f"--seed takes 0 or more, not {args.seed}"
    folder = args.output_dir
    if not folder.strip():  # (' ' wrote the tree into a folder named ' ')
        return "name the folder to write the tree to"
    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        what = "a file" if not os.path.isdir(folder) else "not empty"
        return f"{folder} is {what}: name a new folder (the sample tree is written whole)"
    return None


if __name__ == "__main__":
    raise SystemExit(main())
