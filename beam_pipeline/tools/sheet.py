"""The sheets of `show`: records drawn as stored, in captioned tiles.

Each tile is the stored image scaled to fit (aspect kept, on a grey ground), every object box
outlined in its class colour with the class name, and a caption with the example's class and file
name (a class with its display name where the build knows one: `n01440764 tench` in a caption,
`tench` on a box); `render_sheet` returns the contact sheet (a grid) and where each tile and box
went, `render_copies` the sheet of a build's copies (a row per group, its title saying the kind
and LEAK / CLASH, its members side by side, captioned with their split too), `reduce_colours`
either's 256-colour copy. Reading the records is the command's (`show`); `class_colour` is
shared with the histogram.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
from collections.abc import Mapping, Sequence

from PIL import Image, ImageDraw, ImageFont

from beam_pipeline.output.readback import (
    UNLABELLED_NAME,
    first_value,
    stored_filename,
    typed_values,
)
from beam_pipeline.tools.build_records import class_title, display_name
from beam_pipeline.tools.record_view import Record, damage_of
from schemas import UNLABELLED, DatasetInfo
from schemas import features as F

TILE = 192  # side of the square each image is scaled into, in sheet pixels
MAX_COPY_ROWS = 200  # groups a sheet of copies draws, a row of ~250 px each: 402 x ~50,000 px
PAD = 6  # between tiles and around the sheet
CAPTION = 34  # the caption strip under each tile
HEADER = 26  # the line above the grid
GROUP_TITLE = 20  # the line above each group of copies
MAX_COPIES = 8  # members of a group drawn side by side; the group's title counts the rest
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
      damage: what the tile says of a damaged record ("" for a sound one): its first feature
        of another kind than the schema's, its boxes that are not numbers (not drawn).
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
    damage: str = ""


@dataclasses.dataclass(frozen=True)
class CopyGroup:
    """One group of copies, a line of a build's `duplicates.jsonl`.

    Attributes:
      kind: `exact` (the same stored bytes) or `near` (a pair whose hashes are close).
      distance: the bits apart of a near pair's perceptual hashes.
      leak: a held-out member copies a training image (`core.quality.duplicates.leaks_of`).
      clash: its labelled members are of different classes.
      members: (split, stored file name, class name: "" when unlabelled) of each.
    """

    kind: str
    distance: int
    leak: bool
    clash: bool
    members: tuple[tuple[str, str, str], ...]


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


def caption_lines(
    info: DatasetInfo, label: int, label_text: bytes | None, filename: str, split: str = ""
) -> tuple[str, str]:
    """The two lines under a tile: the class (`n01440764 tench`, `unlabelled`) and the file's
    base name; on the sheet of copies (`split` given), the split and the whole stored file
    name (`validation · val/goat/d.jpg`), which tell copies of one base name apart."""
    caption = _name(info, info.class_list.names, label, label_text, short=False)
    return caption, f"{split} · {filename}" if split else filename.rsplit("/", 1)[-1]


def _draw_caption(draw, cell: tuple[int, int], colour, lines: tuple[str, str], fonts) -> None:
    """The caption strip under a tile: a swatch of the class colour, then its two lines."""
    left, text_top = cell[0], cell[1] + TILE + 3
    draw.rectangle((left, text_top + 2, left + 9, text_top + 11), fill=colour)
    first = _fit(draw, lines[0], fonts[0], TILE - 14)
    draw.text((left + 14, text_top), first, fill=CAPTION_TEXT, font=fonts[0])
    second = _fit(draw, lines[1], fonts[1], TILE)
    draw.text((left, text_top + 16), second, fill=FILENAME_TEXT, font=fonts[1])


def _draw_tile(
    sheet: Image.Image,
    draw: ImageDraw.ImageDraw,
    record: Record,
    cell: tuple[int, int],
    info: DatasetInfo,
    fonts: tuple,
    split: str = "",
) -> Tile:
    box_font = fonts[2]
    values, wrong = typed_values(record.values)  # a damaged record: `damage` says what
    left, top = cell
    draw.rectangle((left, top, left + TILE - 1, top + TILE - 1), fill=TILE_BACKGROUND)
    label = int(first_value(values, F.LABEL, UNLABELLED))
    label_text = first_value(values, F.LABEL_TEXT, None)
    caption = _name(info, info.class_list.names, label, label_text, short=False)
    filename = stored_filename(values)
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
    damage = damage_of(values, wrong)
    if damage:
        said = _fit(draw, damage, box_font, TILE - 8)
        draw.text((left + 4, top + 2), said, fill=ERROR_TEXT, font=box_font)
    colour = class_colour(label, info.background_index)
    lines = caption_lines(info, label, label_text, filename, split)
    _draw_caption(draw, cell, colour, lines, fonts)
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
        damage=damage,
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
        if not all(map(math.isfinite, (xmin, ymin, xmax, ymax))):
            continue  # a damaged record's NaN or infinity: not drawn, the tile says so
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


def _new_sheet(size: tuple[int, int], title: str) -> tuple[Image.Image, ImageDraw.ImageDraw, tuple]:
    """A blank sheet with its title line, its drawing context and its fonts."""
    sheet = Image.new("RGB", size, SHEET_BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    fonts = (_font(13), _font(11), _font(11))
    if title:
        text = _fit(draw, title, fonts[0], size[0] - 2 * PAD)
        draw.text((PAD, 6), text, fill=CAPTION_TEXT, font=fonts[0])
    return sheet, draw, fonts


def render_sheet(
    records: Sequence[Record], info: DatasetInfo, title: str = ""
) -> tuple[Image.Image, list[Tile]]:
    """The contact sheet of `records` in order (row by row) and where each tile went."""
    columns, rows = grid(len(records))
    size = (PAD + columns * (TILE + PAD), HEADER + PAD + rows * (TILE + CAPTION + PAD))
    sheet, draw, fonts = _new_sheet(size, title)
    tiles = []
    for position, record in enumerate(records):
        row, column = divmod(position, columns)
        cell = (PAD + column * (TILE + PAD), HEADER + PAD + row * (TILE + CAPTION + PAD))
        tiles.append(_draw_tile(sheet, draw, record, cell, info, fonts))
    return sheet, tiles


# --- the sheet of copies ----------------------------------------------------------------------


def group_title(group: CopyGroup) -> str:
    """The line above a group of copies: `exact copies: 3 images`, `near copies: 2 bits apart`,
    then `LEAK` and `CLASH` where they are true (and how many members are not drawn)."""
    what = (
        f"near copies: {group.distance} bits apart"
        if group.kind == "near"
        else f"{group.kind} copies: {len(group.members)} images"
    )
    hidden = len(group.members) - MAX_COPIES
    warnings = [word for word, true in (("LEAK", group.leak), ("CLASH", group.clash)) if true]
    more = [f"{hidden} more not shown"] if hidden > 0 else []
    return " · ".join([what, *warnings, *more])


def render_copies(
    groups: Sequence[CopyGroup],
    records: Mapping[tuple[str, str], Record],
    info: DatasetInfo,
    title: str = "",
) -> tuple[Image.Image, list[list[Tile]]]:
    """The sheet of groups of copies, a row per group in order, and where each tile went.

    A row is the group's title (`group_title`, in `ERROR_TEXT` when it leaks or clashes) over
    its first `MAX_COPIES` members side by side, each its record of `records` (by split and
    stored file name) drawn as on the contact sheet, captioned with its split too; a member
    without one is an empty tile saying `not stored` (its Tile's index -1, shard "").
    """
    columns = max((min(len(group.members), MAX_COPIES) for group in groups), default=1)
    height = GROUP_TITLE + TILE + CAPTION + PAD
    size = (PAD + columns * (TILE + PAD), HEADER + PAD + len(groups) * height)
    sheet, draw, fonts = _new_sheet(size, title)
    rows = []
    for number, group in enumerate(groups):
        top = HEADER + PAD + number * height
        colour = ERROR_TEXT if group.leak or group.clash else CAPTION_TEXT
        text = _fit(draw, group_title(group), fonts[0], size[0] - 2 * PAD)
        draw.text((PAD, top + 1), text, fill=colour, font=fonts[0])
        tiles = []
        for column, (split, filename, name) in enumerate(group.members[:MAX_COPIES]):
            cell = (PAD + column * (TILE + PAD), top + GROUP_TITLE)
            record = records.get((split, filename))
            if record is None:
                tiles.append(_draw_missing(draw, (split, filename, name), cell, info, fonts))
            else:
                tiles.append(_draw_tile(sheet, draw, record, cell, info, fonts, split))
        rows.append(tiles)
    return sheet, rows


def _draw_missing(draw, member: tuple[str, str, str], cell, info: DatasetInfo, fonts) -> Tile:
    """The tile of a member of a group that no shard holds: grey, saying so, captioned with
    what `duplicates.jsonl` says of it."""
    split, filename, name = member
    left, top = cell
    draw.rectangle((left, top, left + TILE - 1, top + TILE - 1), fill=TILE_BACKGROUND)
    draw.text((left + 4, top + TILE // 2 - 6), "not stored", fill=ERROR_TEXT, font=fonts[2])
    names = info.class_list.names
    label = names.index(name) if name in names else UNLABELLED
    text = name.encode("utf-8") if name else None
    lines = caption_lines(info, label, text, filename, split)
    _draw_caption(draw, cell, class_colour(label, info.background_index), lines, fonts)
    caption = _name(info, names, label, text, short=False)
    box = (left, top, left + TILE, top + TILE + CAPTION)
    return Tile(-1, "", filename, label, caption, box, None, (0, 0), 0.0, ())


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
