"""`show --duplicates`: the groups of copies a `--duplicates report` build found, drawn as stored.

The tree holds real photos and planted copies: an exact copy in three places (two in train, one
in validation: a leak), a re-encoded one in another class (a clash), a half-size one in
validation (a leak) and a cropped one in the same folder (neither); its labels file gives the
classes display names. Each tile is checked against the stored image, each row against its
group, the captions against the records, and the command's exit codes and messages.
"""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest
from helpers import build, decode, read_split, six_photos, write
from PIL import Image

from beam_pipeline.tools import build_records, show
from beam_pipeline.tools import sheet as sheet_tool
from schemas import BUILD_INFO_FILE, DUPLICATES_FILE, DatasetInfo
from schemas import features as F

LABELS = "cat Felis catus, domestic cat\ngoat Capra hircus\n"
TILE, PAD, CAPTION = sheet_tool.TILE, sheet_tool.PAD, sheet_tool.CAPTION
ROW = sheet_tool.GROUP_TITLE + TILE + CAPTION + PAD  # the height of a group's row

A = ["train/cat/a.jpg", "train/cat/a_again.jpg", "val/cat/a_copy.jpg"]
B = ["train/cat/b.jpg", "train/cat/b_crop.jpg"]
C = ["train/cat/c_q60.jpg", "train/goat/c.jpg"]
D = ["train/goat/d.jpg", "val/goat/d_half.jpg"]
# The file's order (kind, then members) and the sheet's: leaks and clashes first.
FILE_ORDER = [A, B, C, D]
SHEET_ORDER = [A, C, D, B]
TITLES = [
    "exact copies: 3 images · LEAK",
    "near copies: 0 bits apart · CLASH",
    "near copies: 0 bits apart · LEAK",
    "near copies: 2 bits apart",
]


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def photo_tree(root, copies: bool = True):
    """Four real photos in train/ class folders and two in val/; with `copies`, the planted ones."""
    six_photos(root)
    write(root / "labels.txt", LABELS)
    if copies:
        for name in ("train/cat/a_again.jpg", "val/cat/a_copy.jpg"):
            shutil.copy(root / "train/cat/a.jpg", root / name)
        write(root / "train/cat/c_q60.jpg", jpeg(Image.open(root / "train/goat/c.jpg"), 60))
        d = Image.open(root / "train/goat/d.jpg")
        write(root / "val/goat/d_half.jpg", jpeg(d.resize((d.width // 2, d.height // 2))))
        b = Image.open(root / "train/cat/b.jpg")
        write(root / "train/cat/b_crop.jpg", jpeg(b.crop((4, 4, b.width - 4, b.height - 4))))
    return root


def build_tree(root, out, *flags):
    build(root, out, "--labels_file", root / "labels.txt", *flags)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tree = photo_tree(tmp_path_factory.mktemp("planted"))
    out = tmp_path_factory.mktemp("out")
    return build_tree(tree, out, "--duplicates", "report", "--num_shards", "train=2,val=1")


@pytest.fixture(scope="module")
def info(built):
    return DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text())


@pytest.fixture(scope="module")
def drawn(built):
    return show.copies_sheet(str(built))


def stored(built) -> dict[str, dict]:
    """Every record of the build by its stored file name, with its position in its split."""
    found = {}
    for split in ("train", "validation"):
        for position, record in enumerate(read_split(built, split)):
            found[record[F.FILENAME][0].decode()] = {**record, "_position": position}
    return found


def run(capsys, *argv):
    code = show.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err.strip()


def copy_with_groups(built, tmp_path, rows) -> str:
    """A copy of the build whose duplicates.jsonl holds `rows`."""
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    (copy / DUPLICATES_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(copy)


def test_leaks_and_clashes_come_first_then_the_rest_in_the_files_order(built, info, drawn):
    groups = show.read_copies(str(built), info)
    assert [[m[1] for m in group.members] for group in groups] == FILE_ORDER
    assert [(g.kind, g.distance, g.leak, g.clash) for g in groups] == [
        ("exact", 0, True, False),
        ("near", 2, False, False),
        ("near", 0, False, True),
        ("near", 0, True, False),
    ]
    chosen = show.choose_copies(groups)
    assert [sheet_tool.group_title(group) for group in chosen] == TITLES
    _, rows = drawn
    assert [[tile.filename for tile in row] for row in rows] == SHEET_ORDER


def test_the_sheet_is_a_row_per_group_of_its_members_side_by_side(drawn):
    sheet, rows = drawn
    assert sheet.size == (
        PAD + 3 * (TILE + PAD),  # the widest group: the exact copies' three
        sheet_tool.HEADER + PAD + 4 * ROW,
    )
    for number, row in enumerate(rows):
        top = sheet_tool.HEADER + PAD + number * ROW + sheet_tool.GROUP_TITLE
        assert [tile.cell for tile in row] == [
            (
                PAD + column * (TILE + PAD),
                top,
                PAD + column * (TILE + PAD) + TILE,
                top + TILE + CAPTION,
            )
            for column in range(len(row))
        ]


def test_each_tile_is_the_stored_image_of_its_member(built, drawn):
    sheet, rows = drawn
    pixels = np.asarray(sheet).astype(int)
    records = stored(built)
    for row in rows:
        for tile in row:
            record = records[tile.filename]
            assert (tile.index, tile.shard) == (record["_position"], record["_shard"])
            image = decode(record)
            height, width = image.shape[:2]
            scale = min(TILE / width, TILE / height)
            scaled = (round(width * scale), round(height * scale))
            assert tile.size == (width, height) and tile.scale == pytest.approx(scale)
            left, top, right, bottom = tile.image_box
            assert (right - left, bottom - top) == scaled
            assert (left - tile.cell[0], top - tile.cell[1]) == (
                (TILE - scaled[0]) // 2,
                (TILE - scaled[1]) // 2,
            )
            # As the sheet decodes a large JPEG: at a reduced scale first (`draft`).
            expected = Image.open(io.BytesIO(record[F.ENCODED][0]))
            expected.draft("RGB", scaled)
            expected = expected.convert("RGB").resize(scaled, Image.Resampling.LANCZOS)
            difference = np.abs(pixels[top:bottom, left:right] - np.asarray(expected).astype(int))
            assert difference.mean() < 1.0, tile.filename
    # The copies look alike: the exact ones pixel for pixel, the half-size one nearly.
    exact = [np.asarray(sheet.crop(tile.image_box)).astype(int) for tile in rows[0]]
    assert all(np.array_equal(exact[0], other) for other in exact[1:])
    d, d_half = (np.asarray(sheet.crop(tile.image_box)).astype(int) for tile in rows[2])
    assert np.abs(d - d_half).mean() < 6


def test_captions_say_split_class_and_stored_file_name(built, info, drawn):
    sheet, rows = drawn
    records = stored(built)
    titles = {"cat": "cat Felis catus", "goat": "goat Capra hircus"}  # display names cut at ","
    for tile in [tile for row in rows for tile in row]:
        label = records[tile.filename][F.LABEL][0]
        assert (tile.label, tile.caption) == (label, titles[info.class_list.names[label]])
        swatch = (tile.cell[0] + 5, tile.cell[1] + TILE + 10)
        assert sheet.getpixel(swatch) == sheet_tool.class_colour(label, info.background_index)
    half = rows[2][1]
    lines = sheet_tool.caption_lines(info, half.label, None, half.filename, "validation")
    assert lines == ("goat Capra hircus", "validation · val/goat/d_half.jpg")
    # The contact sheet's caption: the class and the base name.
    assert sheet_tool.caption_lines(info, half.label, None, half.filename) == (
        "goat Capra hircus",
        "d_half.jpg",
    )
    lines = sheet_tool.caption_lines(info, -1, None, "x/y.jpg", "test")
    assert lines == ("unlabelled", "test · x/y.jpg")


def test_the_titles_of_leaks_and_clashes_are_drawn_in_the_warning_colour(drawn):
    pixels = np.asarray(drawn[0])
    for number, title in enumerate(TITLES):
        top = sheet_tool.HEADER + PAD + number * ROW
        strip = pixels[top : top + sheet_tool.GROUP_TITLE].reshape(-1, 3)
        warned = (strip == sheet_tool.ERROR_TEXT).all(axis=1).any()
        plain = (strip == sheet_tool.CAPTION_TEXT).all(axis=1).any()
        assert (warned, plain) == (
            (True, False) if "LEAK" in title or "CLASH" in title else (False, True)
        )


def test_the_command_writes_the_sheet_and_says_what_it_shows(built, drawn, tmp_path, capsys):
    target = tmp_path / "copies.png"
    code, out, err = run(capsys, built, "--duplicates", "-o", target)
    assert (code, out, err) == (0, f"wrote {target}: 4 of 4 groups of copies", "")
    assert np.array_equal(np.asarray(Image.open(target)), np.asarray(drawn[0]))
    code, _, _ = run(capsys, built, "--duplicates", "--palette", "-o", tmp_path / "small.png")
    assert code == 0 and Image.open(tmp_path / "small.png").mode == "P"


@pytest.mark.parametrize(
    ("flags", "summary", "order"),
    [
        (["-n", "2"], "2 of 4 groups of copies", [A, C]),
        (["--split", "validation"], "2 of 2 groups of copies with a validation image", [A, D]),
        (["--leaks"], "2 of 2 leaking groups of copies", [A, D]),
        (["--leaks", "-n", "1"], "1 of 2 leaking groups of copies", [A]),
        (["--split", "train", "-n", "3"], "3 of 4 groups of copies with a train image", [A, C, D]),
    ],
)
def test_n_split_and_leaks_pick_the_groups(built, tmp_path, capsys, flags, summary, order):
    target = tmp_path / "copies.png"
    code, out, _ = run(capsys, built, "--duplicates", *flags, "-o", target)
    assert (code, out) == (0, f"wrote {target}: {summary}")
    split = flags[flags.index("--split") + 1] if "--split" in flags else None
    n = int(flags[flags.index("-n") + 1]) if "-n" in flags else 16
    sheet, rows = show.copies_sheet(str(built), split, n, "--leaks" in flags)
    assert [[tile.filename for tile in row] for row in rows] == order
    assert Image.open(target).size == sheet.size
    assert sheet.size[1] == sheet_tool.HEADER + PAD + len(order) * ROW


def test_each_split_is_read_once_for_all_its_members(built, info, monkeypatch):
    opened = []
    open_file = build_records.open_file  # (show reads shards through build_records.read_shard)

    def counting(path):
        opened.append(path)
        return open_file(path)

    monkeypatch.setattr(build_records, "open_file", counting)
    show.copies_sheet(str(built))
    shards = [p for p in opened if p.endswith(".tfrecord")]
    assert shards and len(shards) == len(set(shards)) and len(shards) <= 3
    assert {p.rsplit("/", 1)[-1] for p in shards} >= {info.splits["validation"].shards[0].file}


def test_a_member_no_shard_holds_is_an_empty_tile_saying_so(built, info, tmp_path):
    gone = {"split": "validation", "path": "val/goat/gone.jpg", "class": "goat"}
    row = {"kind": "near", "distance": 1, "leak": True, "clash": False}
    row["members"] = [{"split": "train", "path": D[0], "class": "goat"}, gone]
    copy = copy_with_groups(built, tmp_path, [row])
    sheet, ((kept, missing),) = show.copies_sheet(copy)
    assert kept.filename == D[0] and kept.image_box is not None
    assert (missing.index, missing.shard, missing.filename, missing.image_box) == (
        -1,
        "",
        "val/goat/gone.jpg",
        None,
    )
    assert (missing.label, missing.caption) == (
        info.class_list.names.index("goat"),
        "goat Capra hircus",
    )
    left, top, right, _ = missing.cell
    ground = np.asarray(sheet.crop((left, top, right, top + TILE))).reshape(-1, 3)
    assert (ground == sheet_tool.ERROR_TEXT).all(axis=1).any()  # `not stored`, on grey
    assert (ground == sheet_tool.TILE_BACKGROUND).all(axis=1).mean() > 0.95
    swatch = (left + 5, top + TILE + 10)
    assert sheet.getpixel(swatch) == sheet_tool.class_colour(missing.label, info.background_index)


def test_a_build_that_did_not_look_for_copies_exits_2(tmp_path, capsys):
    out = build_tree(photo_tree(tmp_path / "tree", copies=False), tmp_path / "out")
    code, out_text, err = run(capsys, out, "--duplicates", "-o", tmp_path / "x.png")
    assert (code, out_text) == (2, "")
    assert err == "error: this build did not look for copies: rebuild with --duplicates report"
    assert not (tmp_path / "x.png").exists()


def test_a_build_without_copies_exits_1_and_writes_nothing(tmp_path, capsys):
    tree = photo_tree(tmp_path / "tree", copies=False)
    out = build_tree(tree, tmp_path / "out", "--duplicates", "report")
    code, out_text, err = run(capsys, out, "--duplicates", "-o", tmp_path / "x.png")
    assert (code, out_text) == (1, "")
    assert err == f"error: no copies found in {out} (duplicates.jsonl is empty); nothing to show"
    assert not (tmp_path / "x.png").exists()


def test_copies_none_of_which_is_asked_for_exit_1(built, tmp_path, capsys):
    rows = [json.loads(line) for line in (built / DUPLICATES_FILE).read_text().splitlines()]
    copy = copy_with_groups(built, tmp_path, [row for row in rows if not row["leak"]])
    code, out, err = run(capsys, copy, "--duplicates", "--leaks", "-o", tmp_path / "x.png")
    assert (code, out) == (1, "")
    assert err == f"error: no leaking groups of copies in {copy} (of its 2 groups); nothing to show"
    code, _, err = run(
        capsys, copy, "--duplicates", "--split", "validation", "-o", tmp_path / "x.png"
    )
    assert code == 1 and err.startswith("error: no groups of copies with a validation image in ")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--split", "val"],
            "error: no split 'val' in this build; its splits are train, validation; the tree's "
            "val is written as validation",
        ),
        (["-n", "0"], "error: -n must be at least 1, not 0"),
        (
            ["--class", "cat"],
            "error: --class picks examples for the contact sheet; --duplicates shows copies",
        ),
    ],
)
def test_bad_arguments_exit_2(built, tmp_path, capsys, argv, message):
    code, out, err = run(capsys, built, "--duplicates", *argv, "-o", tmp_path / "x.png")
    assert (code, out, err) == (2, "", message)


def test_leaks_without_duplicates_and_duplicates_with_histogram_exit_2(built, tmp_path, capsys):
    code, _, err = run(capsys, built, "--leaks", "-o", tmp_path / "x.png")
    assert (code, err) == (2, "error: --leaks needs --duplicates: it picks groups of copies")
    with pytest.raises(SystemExit) as exited:
        show.main([str(built), "--duplicates", "--histogram", "-o", str(tmp_path / "x.png")])
    assert exited.value.code == 2
    assert "not allowed with argument --duplicates" in capsys.readouterr().err


def test_a_sheet_of_copies_is_bounded(built, tmp_path, capsys):
    # -n 3000 drew a PNG of 402 x 498,740 px, which Pillow then refused to open.
    code, _, err = run(capsys, built, "--duplicates", "-n", "201", "-o", tmp_path / "x.png")
    assert (code, err) == (
        2,
        f"error: -n 201: draws at most 200 groups, a row each ({DUPLICATES_FILE} lists all)",
    )
    assert not (tmp_path / "x.png").exists()
    code, _, err = run(capsys, built, "--duplicates", "-n", "0", "-o", tmp_path / "x.png")
    assert (code, err) == (2, "error: -n must be at least 1, not 0")


def test_a_damaged_copies_file_is_named(built, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    (copy / DUPLICATES_FILE).unlink()
    code, _, err = run(capsys, copy, "--duplicates", "-o", tmp_path / "x.png")
    assert code == 1
    assert err == (
        f"error: {copy}/{DUPLICATES_FILE} is missing: the build in {copy} is damaged; "
        f"run python -m beam_pipeline verify {copy}"
    )
    (copy / DUPLICATES_FILE).write_text('{"kind": "near"}\n')
    code, _, err = run(capsys, copy, "--duplicates", "-o", tmp_path / "x.png")
    assert code == 2
    assert (
        err
        == f"error: {copy}/{DUPLICATES_FILE} line 1 is not a group of copies: KeyError('members')"
    )


def test_a_large_group_draws_its_first_members_and_counts_the_rest(built, info, tmp_path):
    members = [{"split": "train", "path": A[0], "class": "cat"}]
    members += [{"split": "train", "path": f"train/cat/x{i}.jpg", "class": "cat"} for i in range(9)]
    row = {"kind": "exact", "distance": 0, "leak": False, "clash": False, "members": members}
    sheet, (tiles,) = show.copies_sheet(copy_with_groups(built, tmp_path, [row]))
    group = show.read_copies(str(tmp_path / "copy"), info)[0]
    assert sheet_tool.group_title(group) == "exact copies: 10 images · 2 more not shown"
    assert len(tiles) == sheet_tool.MAX_COPIES
    assert sheet.size[0] == PAD + sheet_tool.MAX_COPIES * (TILE + PAD)
    assert [tile.index >= 0 for tile in tiles] == [True] + [False] * 7
