"""Look at a committed build: a contact sheet of its records, or its class histogram.

    python -m beam_pipeline show OUT [--split S] [-n 16] [--class NAME] [--seed N] -o PNG
    python -m beam_pipeline show OUT --histogram [--split S] -o PNG

The contact sheet shows records as stored: a grid of tiles, each the stored image scaled to fit
the tile (aspect kept, on a grey ground), every object box outlined in its class colour with the
class name, and a caption with the example's class (`unlabelled` for label -1) and file name.
`--seed` draws a deterministic sample of `-n` examples of the split (all of them when it has
fewer): record positions are drawn from the per-shard counts in the build's metadata, and only
the shards holding them are read. `--class NAME` keeps the examples of that label (`background`
too): shards are visited in a seeded order until `-n` are found, so a sample of one class reads
a few shards of a large build, not all of it. `--palette` writes a 256-colour PNG, about four
times smaller. `--histogram` plots `class_counts` of every split (or `--split`) with matplotlib
(the `show` extra); builds of many classes show their 30 most and 30 least frequent. Exit code
0 when the PNG is written, 2 for bad arguments or a directory without a committed build, 1 when
a shard cannot be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import io
import os
import random
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from beam_pipeline.output.readback import (
    UNLABELLED_NAME,
    NoBuildError,
    example_values,
    first_value,
    open_file,
    read_build_info,
)
from schemas import BACKGROUND, BUILD_INFO_FILE, UNLABELLED, DatasetInfo, SplitInfo
from schemas import features as F
from schemas.paths import join
from schemas.tfrecord import CorruptRecordError, read_records

TILE = 192  # side of the square each image is scaled into, in sheet pixels
PAD = 6  # between tiles and around the sheet
CAPTION = 34  # the caption strip under each tile
HEADER = 26  # the line above the grid
LINE = 2  # width of a box outline; a 1-pixel dark halo lies around it
HISTOGRAM_MATPLOTLIB = 'error: --histogram needs matplotlib: pip install "imagenet-tfrecords[show]"'

SHEET_BACKGROUND = (24, 24, 24)
TILE_BACKGROUND = (112, 112, 112)  # neutral grey under an image narrower than its tile
HALO = (0, 0, 0)
CAPTION_TEXT = (240, 240, 240)
FILENAME_TEXT = (185, 185, 185)
BACKGROUND_COLOUR = (150, 150, 150)
UNLABELLED_COLOUR = (90, 90, 90)
ERROR_TEXT = (255, 90, 90)
# Bright, mutually distinct colours (class i gets PALETTE[i % 12]): none white (the histogram's
# ground), none a plain red, yellow, green or blue (the bundled sample's shapes).
PALETTE = (
    (255, 64, 200),
    (0, 229, 255),
    (255, 140, 0),
    (255, 240, 90),
    (0, 255, 128),
    (176, 112, 255),
    (255, 96, 96),
    (120, 200, 255),
    (200, 255, 80),
    (255, 190, 210),
    (0, 180, 160),
    (255, 205, 150),
)


class UsageError(Exception):
    """Bad arguments, or a directory without a committed build: exit code 2."""


@dataclasses.dataclass(frozen=True)
class DrawnBox:
    """One object box as drawn on the sheet.

    Attributes:
      name: the object's class name.
      label: the object's class id.
      colour: the outline's RGB colour (`class_colour(label)`).
      rect: (x0, y0, x1, y1) of the outline in sheet pixels, both ends inclusive; the outline is
        `LINE` pixels wide, inside the rectangle.
      text_rect: (x0, y0, x1, y1) of the class name's filled label, both ends inclusive.
    """

    name: str
    label: int
    colour: tuple[int, int, int]
    rect: tuple[int, int, int, int]
    text_rect: tuple[int, int, int, int]


@dataclasses.dataclass(frozen=True)
class Tile:
    """One example on the sheet.

    Attributes:
      index: the example's position in its split (shard order, then record order).
      shard: the shard file holding it.
      filename: its `image/filename`.
      label: its `image/class/label` (-1 when unlabelled).
      caption: the class name in the caption (`background`, or `unlabelled` for label -1).
      cell: (left, top, right, bottom) of the tile and its caption, PIL box (right/bottom
        exclusive).
      image_box: (left, top, right, bottom) where the scaled image lies, PIL box, so that
        `sheet.crop(tile.image_box)` is the image; None when the image did not decode.
      size: the stored image's (width, height).
      scale: scaled size / stored size.
      boxes: the object boxes drawn over it.
    """

    index: int
    shard: str
    filename: str
    label: int
    caption: str
    cell: tuple[int, int, int, int]
    image_box: tuple[int, int, int, int] | None
    size: tuple[int, int]
    scale: float
    boxes: tuple[DrawnBox, ...]


@dataclasses.dataclass(frozen=True)
class Record:
    """One example read from a shard, as plain Python values by feature key."""

    index: int
    shard: str
    values: dict[str, list[Any]]


def class_colour(label: int, background_index: int) -> tuple[int, int, int]:
    """The colour of a class: its outline and caption swatch, and its histogram bar."""
    if label == UNLABELLED:
        return UNLABELLED_COLOUR
    if label == background_index:
        return BACKGROUND_COLOUR
    return PALETTE[label % len(PALETTE)]


def read_info(output_dir: str) -> DatasetInfo:
    """The build's metadata; UsageError when `output_dir` holds no committed build."""
    try:
        return read_build_info(output_dir)
    except NoBuildError as error:
        raise UsageError(str(error)) from None
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{join(output_dir, BUILD_INFO_FILE)}: {error}") from None


def _split(info: DatasetInfo, split: str | None) -> tuple[str, SplitInfo]:
    if split is None:
        split = "train" if "train" in info.splits else sorted(info.splits)[0]
    if split not in info.splits:
        raise UsageError(
            f"no split {split!r} in this build; its splits are {', '.join(sorted(info.splits))}"
        )
    return split, info.splits[split]


def class_label(info: DatasetInfo, name: str) -> int:
    """The label of a class name (`background` included); UsageError naming some known ones."""
    names = info.class_list.names
    if name in names:
        return names.index(name)
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    examples = ", ".join([*info.classes[:5], "..."] if info.num_classes > 5 else info.classes)
    raise UsageError(
        f"unknown class {name!r}: this build has {info.num_classes} classes "
        f"({examples}) and {BACKGROUND}{hint}"
    )


def _records_at(output_dir: str, split: SplitInfo, indices: Sequence[int]) -> Iterator[Record]:
    """The records at sorted split positions, reading only the shards that hold them."""
    wanted = iter(indices)
    target = next(wanted, None)
    start = 0
    for shard in split.shards:
        end = start + shard.num_examples
        if target is not None and target < end:
            with open_file(join(output_dir, shard.file)) as stream:
                for position, record in enumerate(read_records(stream), start=start):
                    if position == target:
                        yield Record(position, shard.file, example_values(record))
                        target = next(wanted, None)
                        if target is None or target >= end:
                            break
        start = end
        if target is None:
            return


def _records_of_class(
    output_dir: str, split: SplitInfo, label: int, n: int, seed: int
) -> list[Record]:
    """Up to `n` examples of a label, in split order.

    The shards are visited in an order shuffled by `seed`, each read until `n` examples of the
    label are found: a build's global shuffle spreads every class over every shard, so a sample
    of a class reads about `n / examples of the class per shard` shards, not the split.
    """
    starts = [0]
    for shard in split.shards:
        starts.append(starts[-1] + shard.num_examples)
    order = list(range(split.num_shards))
    random.Random(seed).shuffle(order)
    found: list[Record] = []
    for i in order:
        with open_file(join(output_dir, split.shards[i].file)) as stream:
            for position, record in enumerate(read_records(stream), start=starts[i]):
                values = example_values(record)
                if first_value(values, F.LABEL, UNLABELLED) == label:
                    found.append(Record(position, split.shards[i].file, values))
                    if len(found) == n:
                        return sorted(found, key=lambda record: record.index)
    return sorted(found, key=lambda record: record.index)


def sample(
    output_dir: str,
    info: DatasetInfo,
    split: str | None = None,
    n: int = 16,
    class_name: str | None = None,
    seed: int = 0,
) -> tuple[str, int, list[Record]]:
    """(split, number of candidates, the chosen records in split order).

    The candidates are the split's examples, or its examples of `class_name` (as many as its
    `class_counts` says). Of a split, `n` positions are drawn with `random.Random(seed)` and only
    the shards holding them are read; of a class, see `_records_of_class`. All candidates are
    chosen when there are no more than `n`.
    """
    if n < 1:
        raise UsageError(f"-n must be at least 1, not {n}")
    split, split_info = _split(info, split)
    if class_name is None:
        pool = split_info.num_examples
        chosen = sorted(random.Random(seed).sample(range(pool), min(n, pool)))
        return split, pool, list(_records_at(output_dir, split_info, chosen))
    label = class_label(info, class_name)
    if not split_info.labelled:
        raise UsageError(f"split {split!r} is unlabelled; --class needs a labelled split")
    pool = split_info.class_counts[label]
    records = _records_of_class(output_dir, split_info, label, n, seed) if pool else []
    return split, pool, records


# Fonts with more than ASCII, looked for by Pillow in the system's font folders, first found
# first: Pillow's own default font draws a box for every letter outside ASCII (`é`, `ü`, in
# class and file names).
UNICODE_FONTS = ("DejaVuSans.ttf", "NotoSans-Regular.ttf", "Arial Unicode.ttf", "Arial.ttf")


@functools.cache
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    for name in UNICODE_FONTS:
        try:
            return ImageFont.truetype(name, size)
        except (OSError, ImportError):  # not installed; or Pillow without FreeType
            continue
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow without FreeType: the bitmap font
        return ImageFont.load_default()


def _text_size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[int, int]:
    _, _, right, bottom = draw.textbbox((0, 0), text, font=font)
    return right, bottom


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    """`text`, shortened in the middle with '…' until it fits `width` pixels."""
    if _text_size(draw, text, font)[0] <= width:
        return text
    keep = len(text)
    while keep > 1:
        keep -= 1
        head = (keep + 1) // 2
        candidate = text[:head] + "…" + text[len(text) - (keep - head) :]
        if _text_size(draw, candidate, font)[0] <= width:
            return candidate
    return "…"


def _name(names: Sequence[str], label: int, fallback: bytes | None) -> str:
    if label == UNLABELLED:
        return UNLABELLED_NAME
    if 0 <= label < len(names):
        return names[label]
    return fallback.decode("utf-8", "replace") if fallback else str(label)


def _draw_tile(
    sheet: Image.Image,
    draw: ImageDraw.ImageDraw,
    record: Record,
    cell: tuple[int, int],
    info: DatasetInfo,
    fonts: tuple,
) -> Tile:
    caption_font, file_font, box_font = fonts
    names = info.class_list.names
    values = record.values
    left, top = cell
    draw.rectangle((left, top, left + TILE - 1, top + TILE - 1), fill=TILE_BACKGROUND)
    label = int(first_value(values, F.LABEL, UNLABELLED))
    caption = _name(names, label, first_value(values, F.LABEL_TEXT, None))
    filename = first_value(values, F.FILENAME, b"").decode("utf-8", "replace")
    image_box, size, scale, boxes = None, (0, 0), 0.0, []
    try:
        image = Image.open(io.BytesIO(first_value(values, F.ENCODED, b"")))
        size = image.size
        scale = min(TILE / size[0], TILE / size[1])
        scaled = (max(1, round(size[0] * scale)), max(1, round(size[1] * scale)))
        image.draft("RGB", scaled)  # JPEG: decode at a reduced scale when much larger
        image = image.convert("RGB").resize(scaled, Image.Resampling.LANCZOS)
    except Exception as error:  # noqa: BLE001 - any decoder failure: say so on the tile
        message = _fit(draw, f"does not decode: {type(error).__name__}", box_font, TILE - 8)
        draw.text((left + 4, top + TILE // 2 - 6), message, fill=ERROR_TEXT, font=box_font)
    else:
        x0, y0 = left + (TILE - scaled[0]) // 2, top + (TILE - scaled[1]) // 2
        sheet.paste(image, (x0, y0))
        image_box = (x0, y0, x0 + scaled[0], y0 + scaled[1])
        boxes = _draw_boxes(draw, values, image_box, info, box_font)
    # The caption: a swatch of the class colour, the class name, the file's base name.
    colour = class_colour(label, info.background_index)
    text_top = top + TILE + 3
    draw.rectangle((left, text_top + 2, left + 9, text_top + 11), fill=colour)
    draw.text(
        (left + 14, text_top),
        _fit(draw, caption, caption_font, TILE - 14),
        fill=CAPTION_TEXT,
        font=caption_font,
    )
    base = filename.rsplit("/", 1)[-1]
    draw.text(
        (left, text_top + 16), _fit(draw, base, file_font, TILE), fill=FILENAME_TEXT, font=file_font
    )
    return Tile(
        index=record.index,
        shard=record.shard,
        filename=filename,
        label=label,
        caption=caption,
        cell=(left, top, left + TILE, top + TILE + CAPTION),
        image_box=image_box,
        size=size,
        scale=scale,
        boxes=tuple(boxes),
    )


def _draw_boxes(draw, values, image_box, info: DatasetInfo, font) -> list[DrawnBox]:
    """Outlines every object box over the scaled image, then labels each with its class."""
    left, top, right, bottom = image_box
    width, height = right - left, bottom - top
    keys = (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)
    corners = zip(*(values.get(key, []) for key in keys), strict=False)
    labels = values.get(F.OBJECT_LABEL, [])
    texts = values.get(F.OBJECT_TEXT, [])
    drawn = []
    for i, (xmin, ymin, xmax, ymax) in enumerate(corners):
        label = int(labels[i]) if i < len(labels) else UNLABELLED
        name = _name(info.classes, label, texts[i] if i < len(texts) else None)
        x0 = min(max(left + round(xmin * width), left), right - 1)
        y0 = min(max(top + round(ymin * height), top), bottom - 1)
        x1 = min(max(left + round(xmax * width) - 1, x0), right - 1)
        y1 = min(max(top + round(ymax * height) - 1, y0), bottom - 1)
        colour = class_colour(label, info.background_index)
        halo = (
            max(x0 - 1, left),
            max(y0 - 1, top),
            min(x1 + 1, right - 1),
            min(y1 + 1, bottom - 1),
        )
        draw.rectangle(halo, outline=HALO, width=1)  # within the image, under the outline
        draw.rectangle((x0, y0, x1, y1), outline=colour, width=LINE)
        drawn.append((name, label, colour, (x0, y0, x1, y1)))
    boxes = []
    for name, label, colour, rect in drawn:
        x0, y0, x1, y1 = rect
        text_width, text_height = _text_size(draw, name, font)
        box_width, box_height = min(text_width + 4, width), text_height + 2
        tx = max(left, min(x0, right - box_width))
        ty = y0 - 1 - box_height if y0 - 1 - box_height >= top else y0 + LINE
        text_rect = (tx, ty, tx + box_width - 1, ty + box_height - 1)
        draw.rectangle(text_rect, fill=colour)
        draw.text((tx + 2, ty), _fit(draw, name, font, box_width - 4), fill=HALO, font=font)
        boxes.append(DrawnBox(name, label, colour, rect, text_rect))
    return boxes


def grid(count: int) -> tuple[int, int]:
    """(columns, rows) of a sheet of `count` tiles: as square as possible, wider than tall."""
    columns = 1
    while columns * columns < count:
        columns += 1
    return columns, max(1, -(-count // columns))


def render_sheet(
    records: Sequence[Record], info: DatasetInfo, title: str = ""
) -> tuple[Image.Image, list[Tile]]:
    """The contact sheet of `records` in order (row by row) and where each tile went."""
    columns, rows = grid(len(records))
    size = (PAD + columns * (TILE + PAD), HEADER + PAD + rows * (TILE + CAPTION + PAD))
    sheet = Image.new("RGB", size, SHEET_BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    fonts = (_font(13), _font(11), _font(11))
    if title:
        draw.text(
            (PAD, 6),
            _fit(draw, title, fonts[0], size[0] - 2 * PAD),
            fill=CAPTION_TEXT,
            font=fonts[0],
        )
    tiles = []
    for position, record in enumerate(records):
        row, column = divmod(position, columns)
        cell = (PAD + column * (TILE + PAD), HEADER + PAD + row * (TILE + CAPTION + PAD))
        tiles.append(_draw_tile(sheet, draw, record, cell, info, fonts))
    return sheet, tiles


DRAWING_COLOURS = (
    SHEET_BACKGROUND,
    TILE_BACKGROUND,
    HALO,
    CAPTION_TEXT,
    FILENAME_TEXT,
    BACKGROUND_COLOUR,
    UNLABELLED_COLOUR,
    ERROR_TEXT,
    *PALETTE,
)


def reduce_colours(sheet: Image.Image, colours: int = 256) -> Image.Image:
    """A palette ("P") copy of a sheet: the drawing's own colours kept exact, the images'
    pixels mapped to the `colours - len(DRAWING_COLOURS)` median-cut colours of the sheet."""
    adaptive = sheet.quantize(colours - len(DRAWING_COLOURS), method=Image.Quantize.MEDIANCUT)
    entries = adaptive.getpalette()[: 3 * (colours - len(DRAWING_COLOURS))]
    entries += [value for colour in DRAWING_COLOURS for value in colour]
    palette = Image.new("P", (1, 1))
    palette.putpalette(entries + [0] * (768 - len(entries)))
    return sheet.quantize(palette=palette, dither=Image.Dither.NONE)


def describe(split: str, shown: int, pool: int, class_name: str | None, seed: int) -> str:
    """What a sheet shows, e.g. `16 of 90 train examples (seed 0)`."""
    of_class = f" of class {class_name}" if class_name is not None else ""
    return f"{shown} of {pool} {split} examples{of_class} (seed {seed})"


def contact_sheet(
    output_dir: str,
    split: str | None = None,
    n: int = 16,
    class_name: str | None = None,
    seed: int = 0,
) -> tuple[Image.Image, list[Tile]]:
    """The contact sheet of `n` examples of a split (see `sample`) and its tiles' layout.

    Raises UsageError for an unknown split or class, or a directory without a committed build;
    CorruptRecordError or OSError when a shard cannot be read.
    """
    info = read_info(output_dir)
    split, pool, records = sample(output_dir, info, split, n, class_name, seed)
    title = f"{output_dir}: {describe(split, len(records), pool, class_name, seed)}"
    return render_sheet(records, info, title)


# --- the class histogram ----------------------------------------------------------------------

TOP = 30  # builds with more than 2 * TOP classes (background included) show the extremes


def histogram_bars(info: DatasetInfo, split: str, top: int = TOP) -> tuple[list[str], list[int]]:
    """(names, counts) of one split's bars: every class in class order (background last), or,
    with more than `2 * top`, the `top` most then the `top` least frequent by count."""
    names = list(info.class_list.names)
    counts = list(info.splits[split].class_counts)
    if len(names) <= 2 * top:
        return names, counts
    order = sorted(range(len(names)), key=lambda i: (-counts[i], names[i]))
    kept = order[:top] + order[-top:]
    return [names[i] for i in kept], [counts[i] for i in kept]


def class_histogram(info: DatasetInfo, splits: Sequence[str] | None = None, top: int = TOP):
    """A matplotlib Figure (Agg canvas, no pyplot state): one bar chart per split.

    Raises ImportError without matplotlib.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    splits = list(splits or sorted(info.splits))
    names = list(info.class_list.names)
    many = len(names) > 2 * top
    bars = min(len(names), 2 * top)
    longest = min(max(len(name) for name in names), 40)
    width = max(6.4, 1.6 + 0.28 * bars)
    flat = longest * 0.075 <= 0.85 * (width - 1.6) / bars  # names fit under their bars
    height_each = 2.6 + (0.2 if flat else 0.075 * longest)
    # An unlabelled split has no counts to plot: a strip that says so.
    ratios = [1.0 if info.splits[split].labelled else 0.3 for split in splits]
    figure = Figure(figsize=(width, height_each * sum(ratios)), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(splits), 1, squeeze=False, gridspec_kw={"height_ratios": ratios})[
        :, 0
    ]
    for ax, split in zip(axes, splits, strict=True):
        split_info = info.splits[split]
        title = f"{split}: {split_info.num_examples:,} examples"
        if not split_info.labelled:
            ax.set_title(title, fontsize=10)
            ax.text(
                0.5,
                0.5,
                "unlabelled split (label -1): no class counts",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            ax.set_axis_off()
            continue
        shown, counts = histogram_bars(info, split, top)
        positions = list(range(len(shown)))
        if many:  # a gap between the most and the least frequent
            positions = positions[:top] + [p + 1 for p in positions[top:]]
            title += (
                f"; the {top} most and {top} least frequent of {len(names)} classes "
                f"({len(names) - 2 * top} in between not shown)"
            )
        colours = [
            tuple(c / 255 for c in class_colour(names.index(name), info.background_index))
            for name in shown
        ]
        container = ax.bar(positions, counts, color=colours, edgecolor="#333333", linewidth=0.6)
        if len(shown) <= 2 * top:
            ax.bar_label(container, fontsize=7 if many else 8, padding=1)
        labels = [name[:40] for name in shown]
        if flat:
            ax.set_xticks(positions, labels, fontsize=9)
        else:
            ax.set_xticks(positions, labels, rotation=90, fontsize=8 if many else 9)
        ax.set_xlim(min(positions) - 0.7, max(positions) + 0.7)
        ax.set_ylim(0, max(max(counts), 1) * 1.15)
        ax.set_ylabel("examples")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
        ax.set_title(title, fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
    return figure


# --- the command ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline show", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("output_dir", metavar="OUT", help="A build's output directory.")
    parser.add_argument("-o", "--output", required=True, metavar="PNG", help="The PNG to write.")
    parser.add_argument("--split", help="The split to show (default: train, else the first).")
    parser.add_argument("-n", type=int, default=16, help="Examples on the sheet (default 16).")
    parser.add_argument(
        "--class",
        dest="class_name",
        metavar="NAME",
        help="Only examples labelled NAME (a class, or background).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the sample (default 0).")
    parser.add_argument(
        "--palette",
        action="store_true",
        help="Write a 256-colour PNG (about 4x smaller; the boxes' and captions' colours stay "
        "exact, the images' are approximated).",
    )
    parser.add_argument(
        "--histogram",
        action="store_true",
        help="Plot each split's class counts instead (needs matplotlib).",
    )
    args = parser.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"error: --output {args.output}: the folder {folder} does not exist", file=sys.stderr)
        return 2
    try:
        if args.histogram:
            return _histogram(args)
        info = read_info(args.output_dir)
        split, pool, records = sample(
            args.output_dir, info, args.split, args.n, args.class_name, args.seed
        )
        if not records:
            what = f" of class {args.class_name}" if args.class_name is not None else ""
            print(
                f"error: the {split} split has no examples{what}; nothing to show", file=sys.stderr
            )
            return 1
        summary = describe(split, len(records), pool, args.class_name, args.seed)
        sheet, _ = render_sheet(records, info, f"{args.output_dir}: {summary}")
        if args.palette:
            sheet = reduce_colours(sheet)
        sheet.save(args.output, format="PNG", optimize=True)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except CorruptRecordError as error:
        print(
            f"error: a shard of {args.output_dir} is corrupt: {error}; run "
            f"python -m beam_pipeline verify {args.output_dir}",
            file=sys.stderr,
        )
        return 1
    except FileNotFoundError as error:  # a shard the metadata lists
        print(
            f"error: {error.filename} is missing: the build in {args.output_dir} is damaged; "
            f"run python -m beam_pipeline verify {args.output_dir}",
            file=sys.stderr,
        )
        return 1
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: {summary}")
    return 0


def _histogram(args: argparse.Namespace) -> int:
    info = read_info(args.output_dir)
    splits = [_split(info, args.split)[0]] if args.split else sorted(info.splits)
    try:
        import matplotlib  # noqa: F401 - the optional dependency, checked before any work
    except ImportError:
        print(HISTOGRAM_MATPLOTLIB, file=sys.stderr)
        return 2
    figure = class_histogram(info, splits)
    figure.savefig(args.output, format="png")
    width, height = figure.canvas.get_width_height()
    print(
        f"wrote {args.output}: class counts of {', '.join(splits)} "
        f"({info.num_classes} classes and {BACKGROUND}; {width}x{height} px)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
