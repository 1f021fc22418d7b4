"""What a build does with a held-out image that copies a training one (issue 41): `--duplicates
drop_leaks` leaves it out of its split and names it in rejected.jsonl (reason `duplicate`, the
training image it copies), `fail` stops the build with the list; and the search behind
drop_leaks (`leaks.TrainingCopies`) answers as the report does."""

from __future__ import annotations

import json
import os
import random

import pytest
from helpers import build, dead_letters, failure_line, interrupted_build, read_split
from test_duplicates import PLANTED, reported, tree  # noqa: F401 (the planted tree)

from beam_pipeline.core.duplicates import EXACT, NEAR, ImagePrint
from beam_pipeline.core.leaks import Chunk, Copy, TrainingCopies
from beam_pipeline.stages import resume
from beam_pipeline.tools import build as build_tool
from schemas import BUILD_INFO_FILE

DROP = ("--duplicates", "drop_leaks")
NOT_LEAKS = [group for group in PLANTED if not group[2]]
DROPPED = [
    (
        "validation",
        "val/cat/a_copy.jpg",
        "duplicate",
        "a copy of the training image train/cat/a.jpg (exact copy); --duplicates drop_leaks",
    ),
    (
        "validation",
        "val/goat/d_half.jpg",
        "duplicate",
        "a copy of the training image train/goat/d.jpg (near copy, 0 bits apart); "
        "--duplicates drop_leaks",
    ),
]


def dropped(output_dir, root) -> list[tuple]:
    """(split, path in the tree, reason, detail) of each image dropped as a copy."""
    return [
        (line["split"], os.path.relpath(line["path"], root), line["reason"], line["detail"])
        for line in dead_letters(output_dir)
        if line["reason"] == "duplicate"
    ]


def test_drop_leaks_leaves_the_copies_out_of_validation_and_names_them(tree, tmp_path):  # noqa: F811
    info = build(tree, tmp_path / "out", *DROP)
    assert dropped(tmp_path / "out", tree) == DROPPED
    assert reported(tmp_path / "out") == NOT_LEAKS
    names = sorted(
        example["image/filename"][0].decode()
        for example in read_split(tmp_path / "out", "validation")
    )
    assert names == [
        "val/cat/e.jpg",
        "val/goat/blank2.jpg",
        "val/goat/e_mirror.jpg",
        "val/goat/f.jpg",
    ]
    validation = info.splits["validation"]
    assert (validation.num_discovered, validation.num_examples, validation.num_rejected) == (
        6,
        4,
        2,
    )
    assert info.failures == {"duplicate": 2}
    # 2 of 15 images dropped is far past --max_bad_fraction 0.01: copies are not damage.
    assert info.duplicates["dropped"] == {"validation": 2} and info.duplicates["leaked"] == {}
    metadata = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert metadata["options"]["duplicates"] == "drop_leaks"


def test_drop_leaks_drops_the_same_images_on_every_runner(tree, tmp_path):  # noqa: F811
    build(tree, tmp_path / "one", *DROP)
    workers = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    build(tree, tmp_path / "many", *workers, "--num_shards", "3", *DROP)
    assert dropped(tmp_path / "many", tree) == dropped(tmp_path / "one", tree) == DROPPED
    assert reported(tmp_path / "many") == NOT_LEAKS


def test_fail_stops_the_build_with_the_list_and_resume_drops_them(tree, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--quiet"]
    assert build_tool.main([*argv, "--duplicates", "fail"]) == 1
    error = capsys.readouterr().err
    assert failure_line(error) == (
        "BUILD FAILED: --duplicates fail: 2 validation images copy training images: "
        "val/cat/a_copy.jpg copies train/cat/a.jpg (exact copy); val/goat/d_half.jpg copies "
        "train/goat/d.jpg (near copy, 0 bits apart). To fix: remove them from the tree, or "
        "rerun with --duplicates drop_leaks --resume to leave them out (rejected.jsonl, reason "
        "duplicate), or --duplicates report --resume to keep them (the shards written are "
        "kept); the log lists every one"
    )
    assert not (out / BUILD_INFO_FILE).exists()
    assert build_tool.main([*argv, *DROP, "--resume"]) == 0
    assert dropped(out, tree) == DROPPED and reported(out) == NOT_LEAKS
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "Dropped 2 validation images that copy training images (rejected.jsonl, reason "
        "duplicate) Copies: 2 pairs of near copies among 4 images (duplicates.jsonl) Warning: "
        "1 group of copies holds images of different classes"
    ) in said


def test_a_resumed_drop_leaks_build_drops_what_a_whole_one_does(tree, tmp_path, monkeypatch):  # noqa: F811
    out = tmp_path / "resumed"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--quiet", *DROP]
    argv += ["--num_shards", "train=3,val=2", "--direct_running_mode", "in_memory"]
    interrupted_build(monkeypatch, 3, argv)
    assert build_tool.main([*argv, "--resume"]) == 0
    assert dropped(out, tree) == DROPPED and reported(out) == NOT_LEAKS


def test_a_held_out_shard_that_drops_copies_is_another_shard_to_resume():
    from beam_pipeline.core.images import ImagePolicy
    from beam_pipeline.core.labels import Vocabulary

    args = ("validation", 0, 1, [], Vocabulary(("cat",)), ImagePolicy(fingerprints=True))
    assert resume.fingerprint(*args) != resume.fingerprint(*args, True)
    assert resume.fingerprint(*args) == resume.fingerprint(*args, False)


def image(name, perceptual, content=None, spread=100, split="train") -> ImagePrint:
    content = content or random.Random(name).randbytes(16)
    return ImagePrint(split, name, 0, content, perceptual, spread, 40, 64, 64)


def copies(training) -> TrainingCopies:
    """The search over `training`, in two chunks (as two shards' prints)."""
    return TrainingCopies([Chunk.of(training[:2]), Chunk.of(training[2:])])


def test_training_copies_finds_exact_and_near_copies_as_the_report_does():
    rng = random.Random(3)
    training = [image(f"train/{i:03d}.jpg", rng.getrandbits(64)) for i in range(300)]
    training.append(image("train/blank.jpg", 0, spread=3))
    index = copies(training)
    assert len(index) == 301
    some = training[17]
    held = dict(split="validation")
    assert index.copy_of(image("v/a", some.perceptual ^ 1, some.content, **held)) == Copy(
        some.filename, EXACT, 0
    )
    for flipped in range(7):  # within the radius: found in some block, at its distance
        near = some.perceptual ^ ((1 << flipped) - 1) << 40
        assert index.copy_of(image("v/b", near, **held)) == Copy(some.filename, NEAR, flipped)
    assert index.copy_of(image("v/c", some.perceptual ^ 0x7F, **held)) is None  # 7 bits
    # A nearly uniform image is an exact copy or none: blank frames hash alike.
    blank = training[-1]
    assert index.copy_of(image("v/d", 1, **held)) is None
    assert index.copy_of(image("v/e", 0, content=blank.content, spread=2, **held)) == Copy(
        "train/blank.jpg", EXACT, 0
    )
    assert index.copy_of(image("v/f", 0, spread=2, **held)) is None
    assert TrainingCopies([]).copy_of(some) is None


def test_training_copies_names_the_nearest_then_the_first_file_name():
    index = copies([image("train/b.jpg", 0b111 << 20), image("train/a.jpg", 0b111 << 20),
                    image("train/c.jpg", 0b1 << 20)])  # fmt: skip
    assert index.copy_of(image("v", 0b1 << 20 | 0b1 << 30, split="validation")) == Copy(
        "train/c.jpg", NEAR, 1
    )
    assert index.copy_of(image("v", 0b1111 << 20, split="validation")) == Copy(
        "train/a.jpg", NEAR, 1
    )


@pytest.mark.parametrize("policy", ["drop_leaks", "fail"])
def test_a_build_without_leaks_is_the_report_build(tree, tmp_path, policy):  # noqa: F811
    train_only = ["--splits", "train"]
    build(tree, tmp_path / "report", *train_only, "--duplicates", "report")
    build(tree, tmp_path / policy, *train_only, "--duplicates", policy)
    assert reported(tmp_path / policy) == reported(tmp_path / "report")
    assert not dropped(tmp_path / policy, tree)


def test_a_rebuild_without_duplicates_leaves_no_report_of_the_build_it_replaced(
    tree,  # noqa: F811
    tmp_path,
    capsys,
):
    # --overwrite without --duplicates kept the old build's duplicates.jsonl and
    # odd_images.jsonl (leaks of a split that was no more), and verify said OK.
    out = tmp_path / "out"
    build(tree, out, "--splits", "train", "--duplicates", "report")
    assert (out / "duplicates.jsonl").exists() and (out / "odd_images.jsonl").exists()
    build(tree, out, "--splits", "train", "--overwrite")
    assert not (out / "duplicates.jsonl").exists() and not (out / "odd_images.jsonl").exists()
    from beam_pipeline.tools import verify

    (out / "duplicates.jsonl").write_text("{}\n")  # (one left by hand, or by an older release)
    assert verify.main([str(out)]) == 1
    assert (
        "duplicates.jsonl: is here, but build_info.json records no search for copies (an "
        "earlier build's report: delete it, or rebuild with --duplicates report)"
    ) in capsys.readouterr().out
