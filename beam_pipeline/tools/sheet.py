"""The contact sheet of `show`: records drawn as stored, in a grid of captioned tiles.

Each tile is the stored image scaled to fit (aspect kept, on a grey ground), every object box
outlined in its class colour with the class name, and a caption with the example's class and file
name (a class with its display name where the build knows one: `n01440764 tench` in a caption,
`tench` on a box); `render_sheet` returns the sheet and where each tile and box went,
`reduce_colours` its 256-colour copy. Reading and sampling the records is the command's
(`show`); `class_colour` is shared with the histogram.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Sequence
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from beam_pipeline.output.readback import UNLABELLED_NAME, first_value
from beam_pipeline.tools.build_records import class_title, display_name
from schemas import UNLABELLED, DatasetInfo
from schemas import features as F

TILE = 192  # side of the square each image is scaled into, in sheet pixels
PAD = 6  # between tiles and around the sheet
CAPTION = 34  # the caption strip under each tile
HEADER = 26  # the line above the grid
LINE = 2  # width of a box outline; a 1-pixel dark halo lies around it

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


@dataclasses.dataclass(frozen=True)
class DrawnBox:
    """One object box as drawn on the sheet.

    Attributes:
      name: the object's class as drawn: its display name where the build knows one
        (`tench`), else its class name.
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
      caption: the class in the caption (`background`, `unlabelled` for label -1; with the
        display name the build knows after it, `n01440764 tench`).
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


def _text_size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[float, float]:
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


def _name(
    info: DatasetInfo, names: Sequence[str], label: int, fallback: bytes | None, short: bool
) -> str:
    """A label as drawn: its class's title (`n01440764 tench`), or with `short` its display
    name alone (`tench`) where the build knows one; else the record's text, else the number."""
    if label == UNLABELLED:
        return UNLABELLED_NAME
    if 0 <= label < len(names):
        name, known = names[label], info.display_names
        return (display_name(known, name) or name) if short else class_title(known, name)
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
    caption = _name(info, names, label, first_value(values, F.LABEL_TEXT, None), short=False)
    filename = first_value(values, F.FILENAME, b"").decode("utf-8", "replace")
    image_box, size, scale, boxes = None, (0, 0), 0.0, []
    try:
        image: Image.Image = Image.open(io.BytesIO(first_value(values, F.ENCODED, b"")))
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
        name = _name(info, info.classes, label, texts[i] if i < len(texts) else None, short=True)
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
    entries = (adaptive.getpalette() or [])[: 3 * (colours - len(DRAWING_COLOURS))]
    entries += [value for colour in DRAWING_COLOURS for value in colour]
    palette = Image.new("P", (1, 1))
    palette.putpalette(entries + [0] * (768 - len(entries)))
    return sheet.quantize(palette=palette, dither=Image.Dither.NONE)
