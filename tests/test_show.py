"""`show`: the contact sheet draws the stored records as they are, the histogram the counts.

The tree is the bundled sample (train in 3 shards) plus, in `val`, a wide image with two known
boxes and an image whose XML has no object (background), and an unlabelled `test` split. Each
tile is checked against the stored image scaled, each box outline pixel by pixel against the
record's relative box, and the histogram's bars against `class_counts`, in the figure and in the
written PNG's pixels.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import build, decode, ilsvrc_image, jpeg_bytes, read_split
from PIL import Image

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tools import histogram, record_view, sample_tree, show
from beam_pipeline.tools import sheet as sheet_tool
from schemas import BUILD_INFO_FILE, DatasetInfo, SplitInfo
from schemas import features as F

WIDE = (160, 80)  # val/wide: circle (40, 20)-(119, 59), square the whole image
WIDE_OBJECTS = [("circle", 40, 20, 119, 59), ("square", 0, 0, 159, 79)]
BOX_KEYS = (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tree = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(tree), num_train=30, num_val=10, seed=2)
    ilsvrc_image(
        tree, "val", "wide", jpeg_bytes(*WIDE, colour=(40, 90, 60)), voc_xml(WIDE_OBJECTS, WIDE)
    )
    ilsvrc_image(
        tree, "val", "empty", jpeg_bytes(60, 120, colour=(90, 90, 20)), voc_xml([], (60, 120))
    )
    for index in range(5):  # as ILSVRC ships its test split: images, no annotations
        ilsvrc_image(tree, "test", f"t{index}", jpeg_bytes(48, 32, colour=(20 * index, 80, 160)))
    out = tmp_path_factory.mktemp("out")
    build(tree, out, "--splits", "train,val,test", "--num_shards", "train=3,val=1,test=1")
    return out


@pytest.fixture(scope="module")
def info(built):
    return DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text())


@pytest.fixture(scope="module")
def validation_sheet(built):
    return show.contact_sheet(str(built), "validation", n=16, seed=0)


def records_by_filename(built, split):
    return {e[F.FILENAME][0].decode(): e for e in read_split(built, split)}


def expected_rect(box, image_box):
    """The outline `show` must draw for a relative box over the scaled image (inclusive)."""
    left, top, right, bottom = image_box
    width, height = right - left, bottom - top
    x0 = min(max(left + round(box[0] * width), left), right - 1)
    y0 = min(max(top + round(box[1] * height), top), bottom - 1)
    x1 = min(max(left + round(box[2] * width) - 1, x0), right - 1)
    y1 = min(max(top + round(box[3] * height) - 1, y0), bottom - 1)
    return x0, y0, x1, y1


def outline_pixels(rect, width=sheet_tool.LINE):
    """Every pixel of a `width`-wide outline drawn inside `rect` (inclusive)."""
    x0, y0, x1, y1 = rect
    pixels = set()
    for inset in range(width):
        for x in range(x0 + inset, x1 - inset + 1):
            pixels |= {(x, y0 + inset), (x, y1 - inset)}
        for y in range(y0 + inset, y1 - inset + 1):
            pixels |= {(x0 + inset, y), (x1 - inset, y)}
    return pixels


def inside(point, rect):
    return rect[0] <= point[0] <= rect[2] and rect[1] <= point[1] <= rect[3]


def test_the_sheet_is_a_grid_of_every_example_when_the_split_has_fewer(built, validation_sheet):
    sheet, tiles = validation_sheet
    records = read_split(built, "validation")
    assert len(records) == 12 and len(tiles) == 12
    assert (
        sheet_tool.grid(12) == (4, 3)
        and sheet_tool.grid(16) == (4, 4)
        and sheet_tool.grid(17) == (5, 4)
    )
    assert sheet.size == (
        sheet_tool.PAD + 4 * (sheet_tool.TILE + sheet_tool.PAD),
        sheet_tool.HEADER
        + sheet_tool.PAD
        + 3 * (sheet_tool.TILE + sheet_tool.CAPTION + sheet_tool.PAD),
    )
    assert [tile.index for tile in tiles] == list(range(12))
    assert [tile.filename for tile in tiles] == [r[F.FILENAME][0].decode() for r in records]
    for position, tile in enumerate(tiles):
        row, column = divmod(position, 4)
        left = sheet_tool.PAD + column * (sheet_tool.TILE + sheet_tool.PAD)
        top = (
            sheet_tool.HEADER
            + sheet_tool.PAD
            + row * (sheet_tool.TILE + sheet_tool.CAPTION + sheet_tool.PAD)
        )
        assert tile.cell == (
            left,
            top,
            left + sheet_tool.TILE,
            top + sheet_tool.TILE + sheet_tool.CAPTION,
        )


def test_each_tile_is_its_stored_image_scaled_to_fit_on_grey(built, validation_sheet):
    sheet, tiles = validation_sheet
    pixels = np.asarray(sheet).astype(int)
    records = records_by_filename(built, "validation")
    for tile in tiles:
        stored = decode(records[tile.filename])
        height, width = stored.shape[:2]
        assert tile.size == (width, height)
        scale = min(sheet_tool.TILE / width, sheet_tool.TILE / height)
        assert tile.scale == pytest.approx(scale)
        scaled = (round(width * scale), round(height * scale))
        left, top, right, bottom = tile.image_box
        assert (right - left, bottom - top) == scaled and sheet_tool.TILE in scaled
        cell_left, cell_top = tile.cell[:2]
        assert left - cell_left == (sheet_tool.TILE - scaled[0]) // 2
        assert top - cell_top == (sheet_tool.TILE - scaled[1]) // 2
        # The image region equals the stored image resized, away from what is drawn over it.
        expected = np.asarray(Image.fromarray(stored).resize(scaled, Image.Resampling.LANCZOS))
        mask = np.ones(scaled[::-1], bool)
        for box in tile.boxes:
            x0, y0, x1, y1 = box.rect
            for x, y in outline_pixels((x0 - 1, y0 - 1, x1 + 1, y1 + 1), sheet_tool.LINE + 1):
                if left <= x < right and top <= y < bottom:
                    mask[y - top, x - left] = False
            tx0, ty0, tx1, ty1 = box.text_rect
            mask[max(ty0 - top, 0) : ty1 - top + 1, max(tx0 - left, 0) : tx1 - left + 1] = False
        region = pixels[top:bottom, left:right]
        difference = np.abs(region - expected.astype(int))[mask]
        assert difference.mean() < 1.0, tile.filename
        # The rest of the tile is the neutral ground.
        ground = pixels[
            cell_top : cell_top + sheet_tool.TILE, cell_left : cell_left + sheet_tool.TILE
        ]
        outside = np.ones((sheet_tool.TILE, sheet_tool.TILE), bool)
        outside[top - cell_top : bottom - cell_top, left - cell_left : right - cell_left] = False
        assert (ground[outside] == sheet_tool.TILE_BACKGROUND).all()


def test_the_wide_image_shows_its_two_boxes_in_their_class_colours(info, validation_sheet):
    sheet, tiles = validation_sheet
    (tile,) = [t for t in tiles if t.filename.endswith("/wide.JPEG")]
    assert tile.size == WIDE and tile.image_box[2] - tile.image_box[0] == sheet_tool.TILE
    assert tile.image_box[3] - tile.image_box[1] == sheet_tool.TILE // 2  # 192x96, centred
    assert [(box.name, box.label) for box in tile.boxes] == [("circle", 0), ("square", 2)]
    colours = {box.name: box.colour for box in tile.boxes}
    assert colours == {
        "circle": sheet_tool.class_colour(0, info.background_index),
        "square": sheet_tool.class_colour(2, info.background_index),
    }
    assert colours["circle"] != colours["square"]
    left, top = tile.image_box[:2]
    # The XML's pixel boxes over 160x80 (relative xmax = 119/160), scaled by 1.2.
    assert tile.boxes[0].rect == (left + 48, top + 24, left + 142, top + 70)
    assert tile.boxes[1].rect == (left, top, left + 190, top + 94)
    for box in tile.boxes:
        covered = [other.text_rect for other in tile.boxes]
        points = [p for p in outline_pixels(box.rect) if not any(inside(p, r) for r in covered)]
        assert len(points) > 300
        assert {sheet.getpixel(point) for point in points} == {box.colour}
    # The circle's outline has a dark halo just outside it, and its name a label in its colour.
    x0, y0, x1, y1 = tile.boxes[0].rect
    assert {sheet.getpixel((x, y1 + 1)) for x in range(x0 + 20, x1 - 20)} == {sheet_tool.HALO}
    tx0, ty0, tx1, ty1 = tile.boxes[0].text_rect
    assert ty1 == y0 - 2 and tx0 == x0  # above the box, which has room above it
    label = np.asarray(sheet.crop((tx0, ty0, tx1 + 1, ty1 + 1))).reshape(-1, 3)
    assert (label == colours["circle"]).all(axis=1).mean() > 0.5  # the fill
    assert (label.sum(axis=1) < 120).any()  # the dark text


def test_every_outline_is_where_the_record_puts_its_box(built, validation_sheet):
    sheet, tiles = validation_sheet
    records = records_by_filename(built, "validation")
    drawn = 0
    for tile in tiles:
        record = records[tile.filename]
        boxes = list(zip(*(record[k] for k in BOX_KEYS), strict=True))
        assert [box.label for box in tile.boxes] == record[F.OBJECT_LABEL]
        assert [box.rect for box in tile.boxes] == [
            expected_rect(box, tile.image_box) for box in boxes
        ]
        for box in tile.boxes:
            x0, y0, x1, y1 = box.rect
            covered = [b.text_rect for b in tile.boxes] + [
                (b.rect[0] - 1, b.rect[1] - 1, b.rect[2] + 1, b.rect[3] + 1)
                for b in tile.boxes
                if b != box
            ]
            for point in [(x0, (y0 + y1) // 2), (x1, (y0 + y1) // 2), ((x0 + x1) // 2, y1)]:
                if not any(inside(point, rect) for rect in covered):
                    assert sheet.getpixel(point) == box.colour
                    drawn += 1
    assert drawn >= 20


def test_captions_name_the_class_and_show_its_colour(info, validation_sheet, built):
    sheet, tiles = validation_sheet
    records = records_by_filename(built, "validation")
    names = info.class_list.names
    for tile in tiles:
        assert tile.label == records[tile.filename][F.LABEL][0]
        assert tile.caption == names[tile.label]
        swatch = (tile.cell[0] + 5, tile.cell[1] + sheet_tool.TILE + 10)
        assert sheet.getpixel(swatch) == sheet_tool.class_colour(tile.label, info.background_index)
    (empty,) = [t for t in tiles if t.filename.endswith("/empty.JPEG")]
    assert empty.caption == "background" and empty.boxes == ()
    assert empty.label == info.background_index


def test_an_unlabelled_split_is_captioned_unlabelled(built):
    sheet, tiles = show.contact_sheet(str(built), "test", n=16)
    assert len(tiles) == 5
    for tile in tiles:
        assert (tile.label, tile.caption, tile.boxes) == (-1, "unlabelled", ())
        swatch = (tile.cell[0] + 5, tile.cell[1] + sheet_tool.TILE + 10)
        assert sheet.getpixel(swatch) == sheet_tool.UNLABELLED_COLOUR


def test_a_seed_draws_the_same_sample_and_another_seed_another(built):
    records = read_split(built, "train")
    first_sheet, first = show.contact_sheet(str(built), "train", n=5, seed=7)
    again_sheet, again = show.contact_sheet(str(built), "train", n=5, seed=7)
    assert first == again and np.array_equal(np.asarray(first_sheet), np.asarray(again_sheet))
    chosen = sorted(random.Random(7).sample(range(30), 5))
    assert [tile.index for tile in first] == chosen
    assert [tile.filename for tile in first] == [records[i][F.FILENAME][0].decode() for i in chosen]
    assert [tile.shard for tile in first] == [records[i]["_shard"] for i in chosen]
    _, other = show.contact_sheet(str(built), "train", n=5, seed=8)
    assert [tile.index for tile in other] != chosen


def test_only_the_shards_holding_the_sample_are_read(built, info, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    _, tiles = show.contact_sheet(str(built), "train", n=1, seed=3)
    (needed,) = {tile.shard for tile in tiles}
    for shard in info.splits["train"].shards:
        if shard.file != needed:
            (copy / shard.file).unlink()
    assert show.contact_sheet(str(copy), "train", n=1, seed=3)[1] == tiles


@pytest.mark.parametrize("name", ["circle", "triangle", "background"])
def test_class_keeps_exactly_the_examples_of_that_class(built, info, name):
    label = info.class_list.names.index(name)
    records = read_split(built, "train")
    of_class = [i for i, r in enumerate(records) if r[F.LABEL][0] == label]
    assert len(of_class) == info.splits["train"].class_counts[label] > 0
    _, tiles = show.contact_sheet(str(built), "train", n=100, class_name=name)
    assert [tile.index for tile in tiles] == of_class
    assert {(tile.label, tile.caption) for tile in tiles} == {(label, name)}
    _, two = show.contact_sheet(str(built), "train", n=2, class_name=name, seed=1)
    assert len(two) == min(2, len(of_class)) and {tile.label for tile in two} == {label}
    indices = [tile.index for tile in two]
    assert indices == sorted(indices) and set(indices) <= set(of_class)
    assert show.contact_sheet(str(built), "train", n=2, class_name=name, seed=1)[1] == two
    assert [tile.filename for tile in two] == [records[i][F.FILENAME][0].decode() for i in indices]


def test_a_class_sample_stops_reading_once_it_has_enough(built, info, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    records = read_split(built, "train")
    with_circles = {r["_shard"] for r in records if r[F.LABEL][0] == 0}
    assert len(with_circles) == 3
    for seed in range(4):
        _, tiles = show.contact_sheet(str(built), "train", n=1, class_name="circle", seed=seed)
        (needed,) = {tile.shard for tile in tiles}
        hidden = [copy / name for name in with_circles - {needed}]
        for path in hidden:  # a shard visited before would have given its circle first
            path.rename(path.with_suffix(".hidden"))
        try:
            again = show.contact_sheet(str(copy), "train", n=1, class_name="circle", seed=seed)
            assert again[1] == tiles
        finally:
            for path in hidden:
                path.with_suffix(".hidden").rename(path)


def run(capsys, *argv):
    code = show.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err.strip()


def test_the_command_writes_the_sheet_and_says_what_it_shows(built, tmp_path, capsys):
    target = tmp_path / "sheet.png"
    code, out, err = run(capsys, built, "--split", "train", "-n", "4", "--seed", "5", "-o", target)
    assert (code, err) == (0, "")
    assert out == f"wrote {target}: 4 of 30 train examples (seed 5)"
    written = Image.open(target)
    assert written.format == "PNG" and written.mode == "RGB"
    sheet, _ = show.contact_sheet(str(built), "train", n=4, seed=5)
    assert np.array_equal(np.asarray(written), np.asarray(sheet))
    code, out, _ = run(capsys, built, "--class", "circle", "--split", "train", "-o", target)
    circles = DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text()).splits["train"]
    circles = circles.class_counts[0]
    assert out == f"wrote {target}: {circles} of {circles} train examples of class circle (seed 0)"


def test_the_palette_sheet_keeps_the_drawing_colours_exact(built, tmp_path, capsys):
    full, small = tmp_path / "full.png", tmp_path / "small.png"
    assert run(capsys, built, "--split", "validation", "-o", full)[0] == 0
    assert run(capsys, built, "--split", "validation", "--palette", "-o", small)[0] == 0
    assert Image.open(small).mode == "P" and small.stat().st_size < full.stat().st_size
    reduced = Image.open(small).convert("RGB")
    sheet, tiles = show.contact_sheet(str(built), "validation")
    for tile in tiles:
        for box in tile.boxes:
            point = (box.rect[0], (box.rect[1] + box.rect[3]) // 2)
            assert reduced.getpixel(point) == sheet.getpixel(point) == box.colour
    difference = np.abs(np.asarray(reduced).astype(int) - np.asarray(sheet).astype(int))
    assert difference.mean() < 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--split", "valid"],
            "error: no split 'valid' in this build; its splits are test, train, validation",
        ),
        (
            ["--class", "circel"],
            "error: unknown class 'circel': this build has 4 classes (circle, cross, square, "
            "triangle) and background; did you mean circle?",
        ),
        (
            ["--split", "test", "--class", "circle"],
            "error: split 'test' is unlabelled; --class needs a labelled split",
        ),
        (["-n", "0"], "error: -n must be at least 1, not 0"),
        (
            ["--histogram", "--class", "circle"],
            "error: --histogram plots every class; --class, --leaks and -n pick examples",
        ),
        (
            ["--histogram", "-n", "5"],
            "error: --histogram plots every class; --class, --leaks and -n pick examples",
        ),
    ],
)
def test_bad_arguments_exit_2_with_what_is_known(built, tmp_path, capsys, argv, message):
    code, out, err = run(capsys, built, *argv, "-o", tmp_path / "x.png")
    assert (code, out, err) == (2, "", message)
    assert not (tmp_path / "x.png").exists()


def test_an_output_in_a_missing_folder_exits_2_naming_it(built, tmp_path, capsys):
    code, out, err = run(capsys, built, "-o", tmp_path / "nowhere" / "x.png")
    assert (code, out) == (2, "")
    assert (
        err
        == f"error: --output {tmp_path}/nowhere/x.png: the folder {tmp_path}/nowhere does not exist"
    )


def test_an_output_in_the_build_or_not_a_png_file_is_refused(built, tmp_path, capsys):
    """A sheet written over a shard or build_info.json left the build broken, exit 0."""
    before = {p.name: p.read_bytes() for p in built.iterdir() if p.is_file()}
    for target, problem in [
        (built / "train-00000-of-00001.tfrecord", f"it is inside the build {built}"),
        (built / "sheet.png", f"it is inside the build {built}"),
        (tmp_path, "name the PNG file to write"),
        ("", "name the PNG file to write"),
        (tmp_path / "x.jpg", "the picture is a PNG: name the file .png"),
    ]:
        code, out, err = run(capsys, built, "-o", target)
        assert (code, out) == (2, "")
        assert err.startswith(f"error: --output {target}: {problem}")
    assert {p.name: p.read_bytes() for p in built.iterdir() if p.is_file()} == before
    assert not (tmp_path / "x.jpg").exists()


def test_an_output_in_the_tree_or_over_a_file_that_is_no_png_is_refused(built, tmp_path, capsys):
    # Into the tree the build was made from (the next build took the sheet for an image), or
    # over a text file named without an extension: both written, exit 0 (a CLI fuzz trial).
    tree = json.loads((built / BUILD_INFO_FILE).read_text())["source"]["input_dir"]
    notes = tmp_path / "notes"
    notes.write_text("mine")
    for target, problem in [
        (f"{tree}/Data/DET/train/x.png", f"it is inside the tree {tree} the build was made from"),
        (notes, "it is a file that is no PNG: name a new file or a PNG to replace"),
    ]:
        code, out, err = run(capsys, built, "-o", target)
        assert (code, out) == (2, "")
        assert err.startswith(f"error: --output {target}: {problem}")
    assert notes.read_text() == "mine" and not os.path.exists(f"{tree}/Data/DET/train/x.png")
    code, _, _ = run(capsys, built, "-o", tmp_path / "sheet")  # a new file: the name as given
    assert code == 0 and (tmp_path / "sheet").read_bytes().startswith(b"\x89PNG")
    code, _, _ = run(capsys, built, "-o", tmp_path / "sheet")  # a PNG of its: replaced
    assert code == 0


def test_a_directory_without_a_build_exits_2(tmp_path, capsys):
    code, _, err = run(capsys, tmp_path, "-o", tmp_path / "x.png")
    assert code == 2
    assert err == (
        f"error: {tmp_path} holds no committed build (build_info.json is missing): build it "
        f"first (python -m beam_pipeline --input_dir TREE --output_dir {tmp_path}; this is the "
        "output directory, not the tree), rerun an interrupted build's command (--resume keeps "
        "its shards), or let the running build finish; shards without it are never read"
    )
    code, _, err = run(capsys, tmp_path / "nowhere", "-o", tmp_path / "x.png")
    assert code == 2 and err.startswith(f"error: {tmp_path / 'nowhere'} does not exist; ")


def test_a_corrupt_shard_exits_1(built, info, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    shard = copy / info.splits["validation"].shards[0].file
    data = bytearray(shard.read_bytes())
    data[12 + 40] ^= 0x01  # inside record 0's data
    shard.write_bytes(bytes(data))
    # Each way of reading the shards names the one that is corrupt (it said "a shard of").
    label = info.class_list.names[0]
    for way in (["--split", "validation"], ["--split", "validation", "--class", label]):
        code, _, err = run(capsys, copy, *way, "-o", tmp_path / "x.png")
        assert code == 1
        assert err == (
            f"error: {shard} is corrupt: record 0 at byte 0: data checksum mismatch; "
            f"run python -m beam_pipeline verify {copy}"
        )


def test_a_missing_shard_exits_1_naming_it(built, info, tmp_path, capsys):
    # It printed "error: [Errno 2] No such file or directory: '…'".
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    for shard in info.splits["validation"].shards:
        (copy / shard.file).unlink()
    code, _, err = run(capsys, copy, "--split", "validation", "-o", tmp_path / "x.png")
    assert code == 1
    assert re.fullmatch(
        rf"error: {re.escape(str(copy))}/validation-\d+-of-\d+\.tfrecord is missing: the build "
        rf"in {re.escape(str(copy))} is damaged; run python -m beam_pipeline verify "
        rf"{re.escape(str(copy))}\n?",
        err,
    )


# --- the histogram ------------------------------------------------------------------------


def bar_tops_are_drawn(figure, pixels):
    """Checks that the pixels put each bar's top where its height says; returns the bars checked
    (those at least 8 pixels tall)."""
    figure.canvas.draw()  # the constrained layout places the axes when drawn
    height = pixels.shape[0]
    checked = 0
    for ax in figure.axes:
        for bar in ax.patches:
            colour = np.round(np.array(bar.get_facecolor()[:3]) * 255).astype(int)
            x = bar.get_x() + bar.get_width() / 2
            px, py = ax.transData.transform((x, bar.get_height()))
            _, base = ax.transData.transform((x, 0))
            if py - base < 8:
                continue
            column, row = round(px), round(height - py)
            assert np.abs(pixels[row + 3, column, :3] - colour).max() <= 2  # just below the top
            assert np.abs(pixels[row - 3, column, :3] - colour).max() > 30  # just above it
            checked += 1
    return checked


def test_the_histogram_draws_each_splits_class_counts(built, info, tmp_path, capsys):
    target = tmp_path / "hist.png"
    code, out, err = run(capsys, built, "--histogram", "-o", target)
    assert (code, err) == (0, "")
    figure = histogram.class_histogram(info)
    width, height = figure.canvas.get_width_height()
    assert out == (
        f"wrote {target}: class counts of test, train, validation "
        f"(4 classes and background; {width}x{height} px)"
    )
    written = Image.open(target)
    assert written.format == "PNG" and written.size == (width, height)
    assert width == 640 and height == round(280 * 2.3)  # a strip for the unlabelled split
    test_ax, train_ax, validation_ax = figure.axes
    assert len(test_ax.patches) == 0 and not test_ax.axison
    assert "unlabelled" in test_ax.texts[0].get_text()
    names = ["circle", "cross", "square", "triangle", "background"]
    for ax, split in [(train_ax, "train"), (validation_ax, "validation")]:
        assert [bar.get_height() for bar in ax.patches] == list(info.splits[split].class_counts)
        assert [label.get_text() for label in ax.get_xticklabels()] == names
        assert ax.get_title() == f"{split}: {info.splits[split].num_examples} examples"
        assert [c.get_text() for c in ax.texts] == [str(n) for n in info.splits[split].class_counts]
    # The PNG is this figure: each bar's top lies where its count says.
    tall = sum(
        count > 0 for split in ("train", "validation") for count in info.splits[split].class_counts
    )
    assert bar_tops_are_drawn(figure, np.asarray(written.convert("RGB")).astype(int)) == tall
    code, out, _ = run(capsys, built, "--histogram", "--split", "validation", "-o", target)
    assert code == 0 and "class counts of validation " in out
    assert Image.open(target).size == (640, 280)


def test_many_classes_show_the_most_and_least_frequent():
    classes = tuple(f"n{i:08d}" for i in range(100))
    counts = (*(1000 + (i * 37) % 101 for i in range(100)), 5)
    split = SplitInfo(sum(counts), sum(counts), 0, counts, (), {"xml": sum(counts)})
    info = DatasetInfo("1.1.0", classes, {"train": split}, {}, {}, {}, {})
    names, shown = histogram.histogram_bars(info, "train")
    order = sorted(range(101), key=lambda i: (-counts[i], (*classes, "background")[i]))
    assert shown == [counts[i] for i in order[:30] + order[-30:]]
    assert names[-1] == "background" and shown[0] == max(counts)
    figure = histogram.class_histogram(info)
    (ax,) = figure.axes
    assert [bar.get_height() for bar in ax.patches] == shown
    assert [label.get_text() for label in ax.get_xticklabels()] == names
    assert ax.get_title().endswith(
        "the 30 most and 30 least frequent of 101 classes (41 in between not shown)"
    )
    positions = [bar.get_x() + bar.get_width() / 2 for bar in ax.patches]
    assert positions[30] - positions[29] == 2  # a gap between the two groups
    figure.canvas.draw()
    pixels = np.asarray(figure.canvas.buffer_rgba()).astype(int)
    assert bar_tops_are_drawn(figure, pixels) == 59  # background's 5 examples: a sliver


def test_the_histogram_without_matplotlib_says_how_to_install_it(
    built, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run(capsys, built, "--histogram", "-o", tmp_path / "hist.png")
    assert (code, out) == (2, "")
    assert err == 'error: --histogram needs matplotlib: pip install "imagenet-tfrecords[show]"'


def test_the_module_runs_alone_without_tensorflow_or_beam(built, tmp_path):
    target = tmp_path / "sheet.png"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "beam_pipeline.tools.show",
            str(built),
            "-n",
            "2",
            "-o",
            str(target),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {target}: 2 of 30 train examples (seed 0)\n"
    probe = (
        "import sys, beam_pipeline.tools.show, beam_pipeline.tools.inspect_record; "
        "print(sorted({'tensorflow', 'apache_beam', 'matplotlib'} & set(sys.modules)))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert imported.stdout.strip() == "[]"


def test_a_record_whose_image_does_not_decode_gets_a_tile_that_says_so(info):
    record = record_view.Record(
        4, "x.tfrecord", {F.ENCODED: [b"junk"], F.LABEL: [1], F.FILENAME: [b"a/b"]}
    )
    sheet, (tile,) = sheet_tool.render_sheet([record], info)
    assert (tile.image_box, tile.boxes, tile.caption, tile.filename) == (None, (), "cross", "a/b")
    left, top, right, _ = tile.cell
    ground = np.asarray(sheet.crop((left, top, right, top + sheet_tool.TILE))).reshape(-1, 3)
    assert (ground == sheet_tool.ERROR_TEXT).all(axis=1).any()  # the message, on the grey ground
    assert (ground == sheet_tool.TILE_BACKGROUND).all(axis=1).mean() > 0.9


def test_names_beyond_ascii_are_drawn_as_letters_where_a_unicode_font_is_installed():
    # Pillow's default font drew a box for `é` in class and file names.
    from PIL import ImageFont

    from beam_pipeline.tools import sheet as sheet_tool

    try:
        ImageFont.truetype(sheet_tool.UNICODE_FONTS[0], 12)
    except OSError:
        pytest.skip(f"{sheet_tool.UNICODE_FONTS[0]} is not installed here")
    font = sheet_tool._font(12)
    drawn = lambda text: (font.getmask(text).size, bytes(font.getmask(text)))  # noqa: E731
    assert drawn("é") != drawn("\ue000")  # a private-use code point: the missing-glyph box


def test_the_default_split_is_the_training_one_voc_s_trainval_too():
    split = SplitInfo(3, 3, 0, (3,), (), {"xml": 3})
    for splits, shown in (
        (("test", "train", "validation"), "train"),
        (("test", "trainval"), "trainval"),  # (sorted, test came first)
        (("b", "a"), "a"),
    ):
        info = DatasetInfo("2.1.0", ("car",), dict.fromkeys(splits, split), {}, {}, {}, {})
        assert show._split(info, None)[0] == shown
