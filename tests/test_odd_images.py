"""Odd images (issue 41): a blank frame, a tiny picture, a strip and a grey photo among colour
photos are listed in odd_images.jsonl with their reasons and counted in build_info.json, the
summary and `stats`; never dropped; grey is odd only among colour pictures."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from helpers import PHOTOS, build, two_photos, write
from PIL import Image

from beam_pipeline.core.quality import odd_images
from beam_pipeline.core.quality.duplicates import ImagePrint
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import stats
from schemas import BUILD_INFO_FILE, ODD_IMAGES_FILE

REPORT = ("--duplicates", "report")
NONE = {"nearly_uniform": 0, "tiny": 0, "extreme_aspect_ratio": 0, "grey": 0}


def jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Five colour photos in two class folders, and four odd pictures among them: a blank
    frame, a tiny picture, a strip, and a grey photo (a one-channel JPEG, as ImageNet's grey
    pictures are)."""
    root = tmp_path_factory.mktemp("odd")
    for name, count in (("cat", 3), ("goat", 2)):
        for number, path in enumerate(sorted(PHOTOS.glob(f"*/{name}/*.jpg"))[:count]):
            write(root / name / f"{number}.jpg", path.read_bytes())
    photo = Image.open(sorted((PHOTOS / "TRAIN" / "goat").glob("*.jpg"))[0]).convert("RGB")
    write(root / "goat" / "blank.jpg", jpeg(Image.new("RGB", (320, 240), (250, 250, 250))))
    write(root / "goat" / "tiny.jpg", jpeg(photo.resize((24, 20))))
    write(root / "cat" / "strip.jpg", jpeg(photo.crop((0, 0, photo.width, photo.width // 4))))
    write(root / "cat" / "grey.jpg", jpeg(photo.convert("L")))
    return root


def listed(output_dir) -> list[tuple]:
    lines = (output_dir / ODD_IMAGES_FILE).read_text().splitlines()
    return [
        (row["split"], row["path"], row["class"], row["reasons"], row["width"], row["height"])
        for row in map(json.loads, lines)
    ]


def test_each_odd_image_is_listed_with_its_reasons_and_kept(tree, tmp_path):
    info = build(tree, tmp_path / "out", *REPORT)
    width = Image.open(tree / "cat" / "strip.jpg").width
    grey = Image.open(tree / "cat" / "grey.jpg").size
    assert listed(tmp_path / "out") == [
        ("train", "cat/grey.jpg", "cat", ["grey"], *grey),
        ("train", "cat/strip.jpg", "cat", ["extreme_aspect_ratio"], width, width // 4),
        ("train", "goat/blank.jpg", "goat", ["nearly_uniform"], 320, 240),
        ("train", "goat/tiny.jpg", "goat", ["tiny"], 24, 20),
    ]
    assert info.odd_images == {"nearly_uniform": 1, "tiny": 1, "extreme_aspect_ratio": 1, "grey": 1}
    assert info.splits["train"].num_examples == 9  # reported, never dropped
    metadata = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert metadata["odd_images"] == info.odd_images


def test_a_resize_policy_lists_the_sources_sizes(tree, tmp_path):
    # --image_policy shorter_side upscaled the 24x20 picture to 77x64: no longer "tiny".
    build(tree, tmp_path / "out", *REPORT, "--image_policy", "shorter_side", "--image_size", "64")
    rows = {row[1]: row[3:] for row in listed(tmp_path / "out")}
    assert rows["goat/tiny.jpg"] == (["tiny"], 24, 20)
    width = Image.open(tree / "cat" / "strip.jpg").width
    assert rows["cat/strip.jpg"] == (["extreme_aspect_ratio"], width, width // 4)


def test_the_summary_and_stats_count_them(tree, tmp_path, capsys):
    argv = ["--input_dir", str(tree), "--output_dir", str(tmp_path / "out"), "--quiet", *REPORT]
    assert build_tool.main(argv) == 0
    said = (
        "Odd images: 1 nearly uniform, 1 tiny, 1 extreme aspect ratio, 1 grey among colour "
        "(odd_images.jsonl)"
    )
    assert said in " ".join(capsys.readouterr().out.split())
    found = stats.build_stats(str(tmp_path / "out"))
    assert found["odd_images"] == {
        "nearly_uniform": 1,
        "tiny": 1,
        "extreme_aspect_ratio": 1,
        "grey": 1,
    }
    assert stats.format_stats(found).splitlines()[-1] == said


def test_a_build_of_plain_photos_lists_none(tmp_path):
    info = build(two_photos(tmp_path / "photos"), tmp_path / "out", *REPORT)
    assert info.odd_images == NONE
    assert (tmp_path / "out" / ODD_IMAGES_FILE).read_bytes() == b""
    lines = stats.format_stats(stats.build_stats(str(tmp_path / "out"))).splitlines()
    assert lines[-1] == "Odd images: none (odd_images.jsonl)"


def test_without_the_flag_no_odd_images_are_looked_for(tree, tmp_path):
    info = build(tree, tmp_path / "out")
    assert info.odd_images == {} and not (tmp_path / "out" / ODD_IMAGES_FILE).exists()


def print_of(width=640, height=480, luma=90, chroma=40) -> ImagePrint:
    return ImagePrint("train", "x.jpg", 0, bytes(16), 1234, luma, chroma, width, height)


def test_grey_is_odd_only_among_colour_pictures():
    grey = print_of(chroma=odd_images.fp.GREY_SPREAD)
    assert odd_images.reasons(grey, odd_images.grey_is_odd(100, 49)) == ("grey",)
    assert odd_images.reasons(grey, odd_images.grey_is_odd(100, 50)) == ()
    assert odd_images.reasons(print_of(chroma=None), True) == ()  # a luma decode: unknown
    assert odd_images.reasons(print_of(chroma=odd_images.fp.GREY_SPREAD + 1), True) == ()


@pytest.mark.parametrize(
    "size, luma, expected",
    [
        ((640, 480), 9, ()),
        ((640, 480), 8, ("nearly_uniform",)),
        ((32, 32), 90, ()),
        ((31, 480), 90, ("tiny", "extreme_aspect_ratio")),
        ((300, 100), 90, ()),
        ((301, 100), 90, ("extreme_aspect_ratio",)),
        ((100, 301), 90, ("extreme_aspect_ratio",)),
    ],
)
def test_the_thresholds_of_each_reason(size, luma, expected):
    assert odd_images.reasons(print_of(*size, luma=luma), True) == expected


def test_verify_checks_the_lists_against_the_counts(tree, tmp_path):
    from beam_pipeline.tools import verify

    out = tmp_path / "out"
    build(tree, out, *REPORT)
    assert verify.verify(str(out), decode=False)[1] == []
    odd = out / ODD_IMAGES_FILE
    odd.write_text("".join(odd.read_text().splitlines(keepends=True)[1:]))
    copies = out / "duplicates.jsonl"
    groups = [json.loads(line) for line in copies.read_text().splitlines()]
    copies.write_text('{"kind": "near", "members": []}\n')
    problems = [str(problem) for problem in verify.verify(str(out), decode=False)[1]]
    assert problems == [
        "duplicates.jsonl: line 1 is not a group of copies as a build writes one",
        "odd_images.jsonl: lists {'extreme_aspect_ratio': 1, 'nearly_uniform': 1, 'tiny': 1}, "
        "build_info.json counts {'nearly_uniform': 1, 'tiny': 1, 'extreme_aspect_ratio': 1, "
        "'grey': 1}",
    ]
    odd.unlink()
    problems = [str(problem) for problem in verify.verify(str(out), decode=False)[1]]
    assert "odd_images.jsonl: missing: the build recorded what it lists" in problems
    # Each passed as OK: a group cut short, a clash flag flipped, a line with no reason.
    for change, said in (
        (lambda g: g[0].update(members=g[0]["members"][:1]), "line 1 is not a group of copies"),
        (lambda g: g[0].update(clash=not g[0]["clash"]), "line 1: clash is "),
        (lambda g: g.append(dict(g[0])), "its near_pairs are 4, build_info.json counts 3"),
    ):
        edited = [dict(group) for group in groups]
        change(edited)
        copies.write_text("".join(json.dumps(group) + "\n" for group in edited))
        problems = [str(p) for p in verify.verify(str(out), decode=False)[1]]
        assert any(p.startswith(f"duplicates.jsonl: {said}") for p in problems), problems
    for line in (
        '{"x": 1}',
        '{"split": "t", "path": "p", "reasons": 5}',
        '{"reasons": [["tiny"]]}',
    ):
        odd.write_text(line + "\n")  # (the last two ended in tracebacks)
        problems = [str(problem) for problem in verify.verify(str(out), decode=False)[1]]
        assert "odd_images.jsonl: line 1 is not an odd image as a build writes one" in problems


def test_verify_refuses_a_line_naming_an_image_the_build_did_not_store(tree, tmp_path, capsys):
    # verify said OK of an odd_images.jsonl line naming a file no record holds, or one the
    # build rejected: the list is of stored images, as duplicates.jsonl's groups are.
    from beam_pipeline.tools import verify

    source = shutil.copytree(tree, tmp_path / "tree")
    write(source / "cat" / "cut.jpg", (tree / "cat" / "0.jpg").read_bytes()[:3000])
    out = tmp_path / "out"
    build(source, out, *REPORT, "--max_bad_fraction", "0.2")
    assert verify.main([str(out), "--workers", "1"]) == 0
    assert capsys.readouterr().out == "OK: 1 shard verified\n"
    odd = out / ODD_IMAGES_FILE
    lines = [json.loads(line) for line in odd.read_text().splitlines()]
    assert [line["path"] for line in lines] == [
        "cat/grey.jpg",
        "cat/strip.jpg",
        "goat/blank.jpg",
        "goat/tiny.jpg",
    ]
    lines[0]["path"], lines[3]["path"] = "cat/gone.jpg", "cat/cut.jpg"
    odd.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert verify.main([str(out), "--workers", "1"]) == 1
    stored_only = "it lists only images the build stored"
    fix = "rebuild with --overwrite --duplicates report to write the report again"
    assert capsys.readouterr().out.splitlines() == [
        "FAIL odd_images.jsonl: line 1 names cat/gone.jpg of split 'train', which no record of "
        f"the build holds ({stored_only}); {fix}",
        "FAIL odd_images.jsonl: line 4 names cat/cut.jpg of split 'train', which the build "
        f"left out (rejected.jsonl, reason truncated_image; {stored_only}); {fix}",
        "  odd_images.jsonl: 2 problems",
        "2 problems in 1 file (1 shard checked)",
    ]


def test_unstored_images_skips_the_lines_that_are_no_odd_image():
    def row(split, path):
        return {"split": split, "path": path, "reasons": ["tiny"], "width": 8, "height": 8}

    lines = [
        row("train", "cat/a.jpg"),
        {"split": "train", "path": "cat/x.jpg"},  # (no odd image: report_problems names it)
        row("train", "cat/b.jpg"),
        row("validation", "cat/a.jpg"),
    ]
    rejected = [{"split": "train", "path": "/tree/cat/b.jpg", "reason": "duplicate"}]
    found = odd_images.unstored_images(
        lines, lambda split, path: (split, path) == ("train", "cat/a.jpg"), rejected, "drop_leaks"
    )
    fix = "rebuild with --overwrite --duplicates drop_leaks to write the report again"
    assert found == [
        "line 3 names cat/b.jpg of split 'train', which the build left out (rejected.jsonl, "
        f"reason duplicate; it lists only images the build stored); {fix}",
        "line 4 names cat/a.jpg of split 'validation', which no record of the build holds "
        f"(it lists only images the build stored); {fix}",
    ]
