"""Copies among a build's images (issue 41): planted exact and near copies of real photos across
classes and splits are reported, each once, in duplicates.jsonl and build_info.json; a mirror
image, a different photo and blank frames are not."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from helpers import build, interrupted_build, jpeg_bytes, png_bytes, six_photos, two_photos, write
from PIL import Image, ImageOps

from beam_pipeline.console import summary
from beam_pipeline.core.quality import duplicates
from beam_pipeline.core.quality.duplicates import EXACT, NEAR, ImagePrint
from beam_pipeline.tools import build as build_tool
from schemas import BUILD_INFO_FILE, DUPLICATES_FILE

REPORT = ("--duplicates", "report")


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Six real photos in train/ and val/ class folders, and five planted pictures: an exact copy
    (train to val), a re-encoded one (goat to cat), a half-size one (train to val), one cropped by
    4 px (same folder), and a mirror image (not a copy); two blank frames of other sizes."""
    root = six_photos(tmp_path_factory.mktemp("planted"))
    shutil.copy(root / "train/cat/a.jpg", root / "val/cat/a_copy.jpg")
    write(root / "train/cat/c_q60.jpg", jpeg(Image.open(root / "train/goat/c.jpg"), 60))
    d = Image.open(root / "train/goat/d.jpg")
    write(root / "val/goat/d_half.jpg", jpeg(d.resize((d.width // 2, d.height // 2))))
    b = Image.open(root / "train/cat/b.jpg")
    write(root / "train/cat/b_crop.jpg", jpeg(b.crop((4, 4, b.width - 4, b.height - 4))))
    write(root / "val/goat/e_mirror.jpg", jpeg(ImageOps.mirror(Image.open(root / "val/cat/e.jpg"))))
    write(root / "train/goat/blank.jpg", jpeg(Image.new("RGB", (300, 200), (20, 20, 20))))
    write(root / "val/goat/blank2.jpg", jpeg(Image.new("RGB", (200, 300), (20, 20, 21))))
    return root


def reported(output_dir) -> list[tuple]:
    """(kind, distance, leak, clash, members as split:path:class) of each reported group."""
    lines = (output_dir / DUPLICATES_FILE).read_text().splitlines()
    return [
        (
            row["kind"],
            row["distance"],
            row["leak"],
            row["clash"],
            [f"{m['split']}:{m['path']}:{m['class']}" for m in row["members"]],
        )
        for row in map(json.loads, lines)
    ]


PLANTED = [
    (EXACT, 0, True, False, ["train:train/cat/a.jpg:cat", "validation:val/cat/a_copy.jpg:cat"]),
    (NEAR, 2, False, False, ["train:train/cat/b.jpg:cat", "train:train/cat/b_crop.jpg:cat"]),
    (NEAR, 0, False, True, ["train:train/cat/c_q60.jpg:cat", "train:train/goat/c.jpg:goat"]),
    (NEAR, 0, True, False, ["train:train/goat/d.jpg:goat", "validation:val/goat/d_half.jpg:goat"]),
]


def test_every_planted_copy_is_reported_and_nothing_else(tree, tmp_path):
    info = build(tree, tmp_path / "out", *REPORT)
    assert reported(tmp_path / "out") == PLANTED
    assert info.duplicates == {
        "exact_groups": 1,
        "near_pairs": 3,
        "images": 8,
        "leaked": {"validation": 2},
        "clashes": 1,
    }
    written = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert written["duplicates"] == info.duplicates


def test_every_runner_reports_the_same_groups(tree, tmp_path):
    build(tree, tmp_path / "one", *REPORT)
    workers = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    build(tree, tmp_path / "many", *workers, "--num_shards", "3", *REPORT)
    assert (tmp_path / "many" / DUPLICATES_FILE).read_bytes() == (
        tmp_path / "one" / DUPLICATES_FILE
    ).read_bytes()


def test_the_summary_warns_of_leaks_and_clashes(tree, tmp_path, capsys):
    argv = ["--input_dir", str(tree), "--output_dir", str(tmp_path / "out"), "--quiet"]
    assert build_tool.main([*argv, *REPORT]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "Copies: 1 group of exact copies and 3 pairs of near copies among 8 images "
        "(duplicates.jsonl) Warning: 2 validation images are copies of training images "
        "(duplicates.jsonl, leak: true); --duplicates drop_leaks leaves them out Warning: 1 "
        "group of copies holds images of different "
        "classes (duplicates.jsonl, clash: true)"
    ) in text


def test_a_build_without_copies_says_it_found_none(tmp_path):
    info = build(two_photos(tmp_path / "photos"), tmp_path / "out", *REPORT)
    assert info.duplicates == {
        "exact_groups": 0,
        "near_pairs": 0,
        "images": 0,
        "leaked": {},
        "clashes": 0,
    }
    assert (tmp_path / "out" / DUPLICATES_FILE).read_bytes() == b""
    # The summary says the build looked (it said nothing: was the search run?).
    assert summary.duplicates_notes(info.duplicates) == ["Copies: none found (duplicates.jsonl)"]
    assert summary.duplicates_notes({}) == []
    one = {"exact_groups": 1, "near_pairs": 0, "images": 2, "leaked": {"test": 1}, "clashes": 0}
    assert summary.duplicates_notes(one)[1] == (
        "Warning: 1 test image is a copy of a training image (duplicates.jsonl, leak: true); "
        "--duplicates drop_leaks leaves it out"
    )


def prints(*specs) -> list[ImagePrint]:
    return [
        ImagePrint(split, name, label, content, perceptual, 40, 30, 64, 64)
        for split, name, label, content, perceptual in specs
    ]


def test_a_print_survives_its_progress_record_row():
    (one,) = prints(("train", "x/ÿ.jpg", -1, bytes(range(16)), 2**64 - 1))
    assert ImagePrint.from_row(json.loads(json.dumps(one.to_row()))) == one


def test_a_resumed_build_reports_the_copies_in_the_shards_it_kept(tree, tmp_path, monkeypatch):
    # A kept shard is not decoded again: its prints come from its progress record.
    build(tree, tmp_path / "plain", "--num_shards", "train=3,val=2", *REPORT)
    out = tmp_path / "resumed"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--quiet", *REPORT]
    argv += ["--num_shards", "train=3,val=2", "--direct_running_mode", "in_memory"]
    interrupted_build(monkeypatch, 3, argv)
    assert build_tool.main([*argv, "--resume"]) == 0
    assert reported(out) == reported(tmp_path / "plain") == PLANTED


def test_stats_says_what_the_build_found(tree, tmp_path):
    from beam_pipeline.tools import stats

    build(tree, tmp_path / "out", *REPORT)
    found = stats.build_stats(str(tmp_path / "out"))
    assert found["duplicates"]["leaked"] == {"validation": 2}
    assert stats.format_stats(found).splitlines()[-4:-1] == [
        "Copies: 1 group of exact copies and 3 pairs of near copies among 8 images "
        "(duplicates.jsonl)",
        "Warning: 2 validation images are copies of training images (duplicates.jsonl, leak: "
        "true); --duplicates drop_leaks leaves them out",
        "Warning: 1 group of copies holds images of different classes (duplicates.jsonl, "
        "clash: true)",
    ]


def test_without_the_flag_a_build_looks_for_no_copies(tree, tmp_path):
    # The default build writes what it wrote before (no duplicates.jsonl, no counts): finding
    # copies costs throughput (benchmarks/RESULTS.md, "Fingerprints").
    info = build(tree, tmp_path / "out")
    assert info.duplicates == {} and not (tmp_path / "out" / DUPLICATES_FILE).exists()
    metadata = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert "duplicates" not in metadata and "duplicates" not in metadata["options"]


def test_near_pairs_of_a_crowded_bucket_are_every_pair_within_the_radius():
    # 1,100 prints, half of them a few bits from another, through FindDuplicates on the
    # in-process runner: the pairs are those a comparison of every pair finds, each once.
    import random

    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_pipeline.stages.duplicates import FindDuplicates

    rng = random.Random(7)
    hashes = [rng.getrandbits(64) for _ in range(550)]
    hashes += [h ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) for h in hashes]
    members = prints(*((f"s{i % 3}", f"{i:05d}", 0, i.to_bytes(16, "big"), h) for i, h in
                       enumerate(hashes)))  # fmt: skip
    ordered = sorted(members, key=lambda m: (m.split, m.filename))
    expected = sorted(
        (a.filename, b.filename, bin(a.perceptual ^ b.perceptual).count("1"))
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
        if bin(a.perceptual ^ b.perceptual).count("1") <= 6
    )
    assert len(expected) >= 550

    def named(parts):
        groups = duplicates.copies_of(parts)[0]
        assert groups == duplicates.report_order(groups)  # handed in the report's order
        return sorted((g.members[0].filename, g.members[1].filename, g.distance) for g in groups)

    with beam.Pipeline() as pipeline:
        found = (
            pipeline
            | beam.Create([tuple(members[:600]), tuple(members[600:])])
            | FindDuplicates()
            | beam.combiners.ToList()
            | beam.Map(named)
        )
        assert_that(found, equal_to([expected]))


def test_a_converted_image_and_a_file_of_its_stored_bytes_are_one_exact_group(tmp_path):
    # Same stored bytes, but the PNG's print is made before its encoding and the copy's from
    # a decode of those bytes: hashes bits apart, here in the first block's lowest bits (which
    # bucketed it). A search that took copies to share every block lost the group, and `fail`
    # passed the leak (a review).
    from beam_pipeline.core.images import ImagePolicy, normalise_image
    from beam_pipeline.core.quality import fingerprints as fp
    from beam_pipeline.core.quality import hash_search as hs

    root = six_photos(tmp_path / "tree")
    photo, policy = Image.open(root / "train/cat/b.jpg"), ImagePolicy(fingerprints=True)
    shift, _ = hs.block_layout(fp.DEFAULT_RADIUS + 1)[0]  # (the first block: its bits)
    for turn in range(1, 60):
        out = io.BytesIO()
        photo.rotate(turn).save(out, "PNG")
        stored = normalise_image(out.getvalue(), policy)
        again = normalise_image(stored.data, policy)
        if (stored.fingerprint.perceptual ^ again.fingerprint.perceptual) >> shift & 0xF:
            break
    else:
        raise AssertionError("no turn gives hashes apart in the first block's lowest bits")
    assert stored.sha256 == again.sha256
    write(root / "train/cat/p.png", out.getvalue())
    write(root / "val/cat/p_converted.jpg", stored.data)
    info = build(root, tmp_path / "out", *REPORT)
    exact = [group for group in reported(tmp_path / "out") if group[0] == EXACT]
    assert ("exact", 0, True, False, ["train:train/cat/p.png:cat",
            "validation:val/cat/p_converted.jpg:cat"]) in exact  # fmt: skip
    assert info.duplicates["leaked"] == {"validation": 1}


H1 = 0x0123_4567_89AB_CDEF
H2 = H1 ^ 0xF  # 4 bits from H1
NEAR_H2 = H2 ^ 0x3F0  # 6 bits from H2, 10 from H1
SAME, OTHER = bytes(range(16)), bytes(16)
TR, VA = "train", "validation"


def _print(split, name, perceptual, content, spread=40) -> ImagePrint:
    return ImagePrint(split, name, 0, content, perceptual, spread, 30, 64, 64)


@pytest.mark.parametrize(
    ("batch", "leaked"),
    [
        # One content (a converted image and a file of its stored bytes) with hashes 4 bits
        # apart: the report searched the first hash alone and said nothing of v, drop_leaks
        # dropped it; judged by the second, a report said a leak drop_leaks kept.
        ([(TR, "a", H1, SAME), (TR, "b", H2, SAME), (VA, "v", NEAR_H2, OTHER)], ["v"]),
        ([(VA, "a", H1, SAME), (VA, "b", H2, SAME), (TR, "t", NEAR_H2, OTHER)], ["b"]),
        ([(TR, "a", H1, SAME), (VA, "b", H2, SAME), (VA, "w", NEAR_H2, OTHER)], ["b"]),
        ([(TR, "a", H1, SAME), ("test", "b", H2, SAME), (VA, "w", NEAR_H2, OTHER)], ["b"]),
        ([(TR, "a", H1, SAME, 3), (VA, "b", H2, SAME), (VA, "w", NEAR_H2, OTHER)], ["b"]),
        # Exact copies with one hash: a near copy of the held-out one copies the training one.
        ([(TR, "a", H2, SAME), ("test", "b", H2, SAME), (VA, "w", NEAR_H2, OTHER)], ["b", "w"]),
    ],
)
def test_the_report_and_drop_leaks_judge_each_image_by_its_own_hash(batch, leaked):
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_pipeline.core.quality.leaks import Chunk, TrainingCopies
    from beam_pipeline.stages.duplicates import FindDuplicates

    images = [_print(*spec) for spec in batch]

    def reported(parts):
        found, alike = duplicates.copies_of(parts)
        leaks, _ = duplicates.leaks_of(duplicates.report_order(found), "train", alike)
        return sorted(leak.member.filename for leak in leaks)

    with beam.Pipeline() as pipeline:
        found = (
            pipeline
            | beam.Create([tuple(images)])
            | FindDuplicates()
            | beam.combiners.ToList()
            | beam.Map(reported)
        )
        assert_that(found, equal_to([leaked]))
    copies = TrainingCopies([Chunk.of([p for p in images if p.split == "train"])])
    dropped = sorted(p.filename for p in images if p.split != "train" and copies.copy_of(p))
    assert dropped == leaked


def test_a_near_pair_is_said_of_the_copy_it_is_near_at_its_own_distance():
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_pipeline.stages.duplicates import FindDuplicates

    batch = [(TR, "a", H1, SAME), (TR, "b", H2, SAME), (VA, "v", NEAR_H2, OTHER)]

    def said(parts):
        groups = duplicates.report_order(duplicates.copies_of(parts)[0])
        return [(g.kind, [m.filename for m in g.members], g.distance) for g in groups]

    with beam.Pipeline() as pipeline:
        found = (
            pipeline
            | beam.Create([tuple(_print(*spec) for spec in batch)])
            | FindDuplicates()
            | beam.combiners.ToList()
            | beam.Map(said)
        )
        # No near pair of a and b: one content, an exact group.
        assert_that(found, equal_to([[("exact", ["a", "b"], 0), ("near", ["b", "v"], 6)]]))


def test_the_report_is_checked_against_its_counts():
    # verify counted its groups by kind alone: flags flipped and members cut passed as OK.
    member = {"split": "train", "path": "a.jpg", "class": "cat"}
    other = {"split": "validation", "path": "b.jpg", "class": "cat"}
    line = {"kind": "exact", "distance": 0, "leak": True, "clash": False}
    recorded = {"exact_groups": 1, "near_pairs": 0, "images": 2, "clashes": 0}
    good = [{**line, "members": [member, other]}]
    leaked = {**recorded, "leaked": {"validation": 1}}
    assert duplicates.report_problems(good, leaked, "train") == []
    assert duplicates.report_problems(good, {**recorded, "leaked": {}}, "train") == [
        "its groups that leak hold 1 held-out image, build_info.json counts 0 leaked"
    ]
    clash = [{**line, "members": [member, {**other, "class": "dog"}]}]
    assert duplicates.report_problems(clash, leaked, "train") == [
        "line 1: clash is false, its classes say otherwise"
    ]
    assert duplicates.report_problems([{**line, "members": [member]}], recorded, "train") == [
        "line 1 is not a group of copies as a build writes one"
    ]
    # One leak flag flipped: a training image and its held-out copy, or no held-out image.
    flipped = [{**good[0], "leak": False}]
    assert duplicates.report_problems(flipped, leaked, "train") == [
        "line 1: leak is false, yet a held-out image copies a train image in it"
    ]
    two = {**member, "path": "c.jpg"}
    trained = [*good, {**line, "members": [member, two]}]
    counts = {**leaked, "exact_groups": 2, "images": 3}
    assert duplicates.report_problems(trained, counts, "train") == [
        "line 2: leak is true with no held-out image"
    ]
    assert duplicates.report_problems(good, leaked, None) == [
        "line 1: leak is true with no training split in the build"
    ]
    # Two validation images leaked; the groups that leak hold one (its twin's flag flipped).
    twin = {**other, "path": "b2.jpg"}
    near = {"kind": "near", "distance": 3, "leak": False, "clash": False}
    cut = [*good, {**near, "members": [{**other, "path": "x.jpg"}, twin]}]
    counts = {**recorded, "exact_groups": 1, "near_pairs": 1, "images": 4}
    assert duplicates.report_problems(cut, {**counts, "leaked": {"validation": 2}}, "train") == [
        "its groups that leak hold 1 of the 2 validation images build_info.json counts as leaked"
    ]


def test_the_members_of_the_report_are_held_against_the_records():
    # verify said OK of a group that named an image of no record (a report edited, another
    # build's): a group names only images the build stored.
    from beam_pipeline.core.record_checks import Tally, name_digest, stored_names

    train = Tally()
    train.names += name_digest(b"train/a.jpg") + name_digest("train/é.jpg".encode())
    # validation: a bad record, so its names are not all known; test: not in the build.
    stored = stored_names({"train": train}, ["train", "validation"])
    assert stored("train", "train/a.jpg") and stored("train", "train/é.jpg")
    assert not stored("train", "train/b.jpg") and not stored("train", "train/\ud800.jpg")
    assert stored("validation", "val/anything.jpg") and not stored("test", "test/a.jpg")

    def group(*members):
        listed = [{"split": split, "path": path, "class": "cat"} for split, path in members]
        return {"kind": "exact", "distance": 0, "leak": False, "clash": False, "members": listed}

    lines = [
        group(("train", "train/a.jpg"), ("train", "train/b.jpg")),
        {"kind": "exact"},  # (no group: report_problems names it)
        group(("validation", "val/x.jpg"), ("test", "test/a.jpg"), ("train", "train/c.jpg")),
    ]
    rejected = [
        {"split": "train", "path": "/tree/train/b.jpg", "reason": "truncated_image"},
        {"split": "test", "path": "/tree/a.xml", "image": "/tree/test/a.jpg", "reason": "x"},
        {"split": "validation", "path": "/tree/train/c.jpg", "reason": "duplicate"},  # (split)
    ]
    stored_only = "a group names only images the build stored"
    fix = "rebuild with --overwrite --duplicates report to write the report again"
    assert duplicates.unstored_members(lines, stored, rejected, None) == [
        "line 1 names train/b.jpg of split 'train', which the build left out (rejected.jsonl, "
        f"reason truncated_image; {stored_only}); {fix}",
        "line 3 names test/a.jpg of split 'test', which the build left out (rejected.jsonl, "
        f"reason x; {stored_only}); {fix}",
        f"line 3 names train/c.jpg of split 'train', which no record of the build holds "
        f"({stored_only}); {fix}",
    ]


def test_prints_made_in_runs_are_those_made_at_once_and_hold_no_full_size_pixels():
    # The writer makes a kept JPEG's print in runs after the decodes (cheaper, its small decode
    # held); a converted image's RGB is the stored size, so its print is made at once.
    from beam_pipeline.core.entries import IndexEntry, LabelledEntry
    from beam_pipeline.core.images import ImagePolicy, normalise_image
    from beam_pipeline.stages.duplicates import PRINT_RUN, PrintRuns, image_print

    policy = ImagePolicy(fingerprints=True)
    images, runs, expected = [], PrintRuns(None), []
    for i in range(2 * PRINT_RUN + 5):
        data = png_bytes(40, 30) if i % 7 == 0 else jpeg_bytes(64 + i, 48, (i * 3, 90, 200 - i))
        image = normalise_image(data, policy)
        entry = IndexEntry("train", f"k{i}", f"k{i}.JPEG", None, None, len(data))
        labelled = LabelledEntry(entry, None, i % 3, (), "folder")
        images.append((labelled, image))
        runs.add(labelled, image)
        assert not any(isinstance(p[2], Image.Image) for p in runs._pending)
        size = (image.source_width, image.source_height)
        expected.append(image_print(labelled, image.sha256, image.fingerprint, *size))
    assert runs.made() == expected
    assert len(expected) == 2 * PRINT_RUN + 5
    assert len({p.perceptual for p in expected}) > 1
    assert PrintRuns(None).made() == []
