"""What a build does with a held-out image that copies a training one (issue 41): `--duplicates
drop_leaks` leaves it out of its split and names it in rejected.jsonl (reason `duplicate`, the
training image it copies), `fail` stops the build with the list; and the search behind
drop_leaks (`leaks.TrainingCopies`) answers as the report does."""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil

import pytest
from helpers import (
    build,
    dead_letters,
    failure_line,
    interrupted_build,
    read_split,
    six_photos,
    write,
)
from PIL import Image
from test_duplicates import PLANTED, reported, tree  # noqa: F401 (the planted tree)

from beam_pipeline.console import summary
from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.core.quality import duplicates
from beam_pipeline.core.quality.duplicates import EXACT, NEAR, Group, ImagePrint, Member
from beam_pipeline.core.quality.leaks import Chunk, Copy, TrainingCopies
from beam_pipeline.failures import BuildFailed
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


def test_verify_refuses_a_report_that_names_an_image_the_build_did_not_store(
    tree,  # noqa: F811
    tmp_path,
    capsys,
):
    # verify said OK of a duplicates.jsonl whose group named a file no record holds, or a copy
    # drop_leaks left out (rejected.jsonl, reason duplicate): a group names stored images only.
    from beam_pipeline.tools import verify

    built = tmp_path / "out"
    build(tree, built, *DROP)
    assert verify.main([str(built), "--workers", "1", "--no_decode"]) == 0
    capsys.readouterr()
    fix = "rebuild with --overwrite --duplicates drop_leaks to write the report again"

    def verified(edit_line, edit_counts=None) -> tuple[int, list[str]]:
        out = shutil.copytree(built, tmp_path / f"edited{len(list(tmp_path.iterdir()))}")
        lines = [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]
        edit_line(lines)
        (out / "duplicates.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        if edit_counts:
            metadata = json.loads((out / BUILD_INFO_FILE).read_text())
            edit_counts(metadata["duplicates"])
            (out / BUILD_INFO_FILE).write_text(json.dumps(metadata))
        code = verify.main([str(out), "--workers", "1", "--no_decode"])
        return code, capsys.readouterr().out.splitlines()

    assert reported(built)[0][4] == ["train:train/cat/b.jpg:cat", "train:train/cat/b_crop.jpg:cat"]
    gone = {"split": "train", "path": "train/cat/b_gone.jpg", "class": "cat"}
    assert verified(lambda lines: lines[0]["members"].__setitem__(1, gone)) == (
        1,
        [
            "FAIL duplicates.jsonl: line 1 names train/cat/b_gone.jpg of split 'train', which "
            f"no record of the build holds (a group names only images the build stored); {fix}",
            "1 problem in 1 file (2 shards checked)",
        ],
    )
    # The clash pair's goat c.jpg given as the goat copy the build dropped: a pair that leaks
    # (its flag and the leaked count to match), of a member the records do not hold.
    assert reported(built)[1][4] == ["train:train/cat/c_q60.jpg:cat", "train:train/goat/c.jpg:goat"]
    dropped_copy = {"split": "validation", "path": "val/goat/d_half.jpg", "class": "goat"}

    def leak(lines):
        lines[1]["members"][1], lines[1]["leak"] = dropped_copy, True

    assert verified(leak, lambda counts: counts.__setitem__("leaked", {"validation": 1})) == (
        1,
        [
            "FAIL duplicates.jsonl: line 2 names val/goat/d_half.jpg of split 'validation', "
            "which the build left out (rejected.jsonl, reason duplicate; a group names only "
            f"images the build stored); {fix}",
            "1 problem in 1 file (2 shards checked)",
        ],
    )


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
    log = pathlib.Path(error.strip().splitlines()[-1].removeprefix("full log: ")).read_text()
    listed = [
        line for line in log.splitlines() if " copies train/" in line and "FAILED" not in line
    ]
    assert listed == [  # once (each of the runner's tracebacks repeated the list)
        "val/cat/a_copy.jpg copies train/cat/a.jpg (exact copy)",
        "val/goat/d_half.jpg copies train/goat/d.jpg (near copy, 0 bits apart)",
    ]
    assert not (out / BUILD_INFO_FILE).exists()
    assert build_tool.main([*argv, *DROP, "--resume"]) == 0
    assert dropped(out, tree) == DROPPED and reported(out) == NOT_LEAKS
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "Dropped 2 validation images that copy training images (rejected.jsonl, reason "
        "duplicate) Copies: 2 pairs of near copies among 4 images (duplicates.jsonl) Warning: "
        "1 group of copies holds images of different classes"
    ) in said
    # Over a complete build, the way on is --overwrite --resume (--resume alone is refused).
    assert build_tool.main([*argv, "--duplicates", "fail", "--overwrite"]) == 1
    error = failure_line(capsys.readouterr().err)
    assert "--duplicates drop_leaks --overwrite --resume to leave them out" in error
    assert "--duplicates report --overwrite --resume to keep them" in error
    assert build_tool.main([*argv, "--duplicates", "report", "--overwrite", "--resume"]) == 0


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
    training = [image("train/a.jpg", 1), image("train/b.jpg", 2)]
    checked = copies(training).digest()
    assert resume.fingerprint(*args) != resume.fingerprint(*args, checked)
    assert resume.fingerprint(*args) == resume.fingerprint(*args, None)
    # Checked against other training images: another shard (a resumed build kept the drops
    # of a training image deleted since, and failed for ever on one added since).
    assert copies(training[::-1]).digest() == checked  # (in any order the writers give them)
    for other in (training[:1], [training[0], image("train/b.jpg", 3)], [*training, training[0]]):
        assert copies(other).digest() != checked
    assert TrainingCopies([]).digest() != checked


def image(name, perceptual, content=None, spread=100, split="train", label=0) -> ImagePrint:
    content = content or random.Random(name).randbytes(16)
    return ImagePrint(split, name, label, content, perceptual, spread, 40, 64, 64)


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
        some.filename, EXACT, 0, ((0, some.filename),)
    )
    for flipped in range(7):  # within the radius: found in some block, at its distance
        near = some.perceptual ^ ((1 << flipped) - 1) << 40
        assert index.copy_of(image("v/b", near, **held)) == Copy(
            some.filename, NEAR, flipped, ((0, some.filename),)
        )
    assert index.copy_of(image("v/c", some.perceptual ^ 0x7F, **held)) is None  # 7 bits
    # A nearly uniform image is an exact copy or none: blank frames hash alike.
    blank = training[-1]
    assert index.copy_of(image("v/d", 1, **held)) is None
    assert index.copy_of(image("v/e", 0, content=blank.content, spread=2, **held)) == Copy(
        "train/blank.jpg", EXACT, 0, ((0, "train/blank.jpg"),)
    )
    assert index.copy_of(image("v/f", 0, spread=2, **held)) is None
    assert TrainingCopies([]).copy_of(some) is None


def test_training_copies_names_the_nearest_then_the_first_file_name():
    index = copies([image("train/b.jpg", 0b111 << 20), image("train/a.jpg", 0b111 << 20),
                    image("train/c.jpg", 0b1 << 20)])  # fmt: skip
    assert index.copy_of(image("v", 0b1 << 20 | 0b1 << 30, split="validation")) == Copy(
        "train/c.jpg", NEAR, 1, ((0, "train/c.jpg"),)
    )
    assert index.copy_of(image("v", 0b1111 << 20, split="validation")) == Copy(
        "train/a.jpg", NEAR, 1, ((0, "train/a.jpg"),)
    )


def test_a_dropped_copy_of_another_class_says_the_clash_it_is_in():
    """Dropped, it is in no group of duplicates.jsonl: the clash was said nowhere."""
    index = copies([image("train/cat.jpg", 0b1 << 20, label=0), image("train/x.jpg", 1 << 50)])
    copy = index.copy_of(image("val/goat.jpg", 0b11 << 20, split="validation", label=1))
    assert copy == Copy("train/cat.jpg", NEAR, 1, ((0, "train/cat.jpg"),))
    names = ("cat", "goat", "background")
    assert copy.detail(1, names) == (
        "a copy of the training image train/cat.jpg (near copy, 1 bits apart), labelled cat "
        "there and goat here: a clash; --duplicates drop_leaks"
    )
    plain = "a copy of the training image train/cat.jpg (near copy, 1 bits apart); --duplicates"
    assert copy.detail(0, names).startswith(plain) and copy.detail(-1, names).startswith(plain)
    # Nearest to an image of its own class, within the radius of one of another: the report
    # shows that second pair's clash, which dropping the image would hide.
    index = copies([image("train/goat1.jpg", 0, label=1), image("train/cat2.jpg", 0x7F, label=0),
                    image("train/x.jpg", 1 << 50)])  # fmt: skip
    copy = index.copy_of(image("val/goat.jpg", 0b111, split="validation", label=1))
    assert copy == Copy("train/goat1.jpg", NEAR, 3, ((0, "train/cat2.jpg"), (1, "train/goat1.jpg")))
    assert copy.detail(1, names) == (
        "a copy of the training image train/goat1.jpg (near copy, 3 bits apart) and of "
        "train/cat2.jpg, labelled cat there and goat here: a clash; --duplicates drop_leaks"
    )
    # An exact copy of two training images, of its class and of another: the other named.
    index = copies([image("train/cat/a.jpg", 5, bytes(16), label=0),
                    image("train/goat/b.jpg", 5, bytes(16), label=1)])  # fmt: skip
    copy = index.copy_of(image("val/cat/c.jpg", 5, bytes(16), split="validation", label=0))
    assert copy.detail(0, names) == (
        "a copy of the training image train/cat/a.jpg (exact copy) and of train/goat/b.jpg, "
        "labelled goat there and cat here: a clash; --duplicates drop_leaks"
    )


def test_drop_leaks_counts_and_warns_of_the_clashes_of_the_copies_it_drops(tmp_path):
    root = six_photos(tmp_path / "tree")
    shutil.copy(root / "train/cat/a.jpg", root / "val/goat/a_as_goat.jpg")
    info = build(root, tmp_path / "out", *DROP)
    assert info.duplicates["dropped"] == {"validation": 1}
    assert info.duplicates["dropped_clashes"] == 1
    (line,) = [d for d in dead_letters(tmp_path / "out") if d["reason"] == "duplicate"]
    assert line["detail"].endswith(
        "(exact copy), labelled cat there and goat here: a clash; --duplicates drop_leaks"
    )
    assert summary.duplicates_notes(info.duplicates)[1] == (
        "Warning: 1 dropped image is labelled otherwise than the training image it copies "
        "(rejected.jsonl: a clash); one of the two is mislabelled"
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


def member(split, name):
    return Member(split, name, 0)


def test_a_leak_is_any_held_out_image_that_copies_a_training_one_through_its_exact_copies():
    """The near search pairs one image of each content and perceptual hash (the first in split
    order), so a report that judged the pair alone missed leaks that drop_leaks then dropped."""
    train, test = member("train", "t/x.jpg"), member("test", "s/x_copy.jpg")
    val, val_twin = member("validation", "v/x_q80.jpg"), member("validation", "v/x_q80b.jpg")
    other = member("validation", "v/other.jpg")
    groups = duplicates.report_order(
        [
            Group(EXACT, (test, train)),  # sorted members: the test copy first
            Group(NEAR, (test, val), 3),  # the near pair the search found: test's x, not train's
            Group(EXACT, (val, val_twin)),  # two copies of one re-encode, both in validation
            Group(NEAR, (other, val_twin), 5),  # not a copy of a training image
        ]
    )
    # Exact copies have one perceptual hash: the pair's members stand for them.
    alike = {test: (test, train), val: (val, val_twin)}
    leaks, leaking = duplicates.leaks_of(groups, "train", alike)
    assert [(leak.member, leak.original, leak.kind, leak.distance) for leak in leaks] == [
        (test, train, EXACT, 0),
        (val, train, NEAR, 3),
        (val_twin, train, NEAR, 3),
    ]
    # Each leaked image is in a group that leaks: val_twin in its exact group with val (a
    # reader of duplicates.jsonl found it in none: its pair with `other` leaks nothing).
    assert leaking == {
        Group(EXACT, (test, train)),
        Group(NEAR, (test, val), 3),
        Group(EXACT, (val, val_twin)),
    }
    assert duplicates.counts(groups, leaks)["leaked"] == {"test": 1, "validation": 2}
    said, every = duplicates.leak_list(leaks)
    assert said.startswith("1 test and 2 validation images copy training images: ")
    assert every[1] == "v/x_q80.jpg copies t/x.jpg (near copy, 3 bits apart)"
    # The copy named is the one drop_leaks names: exact first, then the nearest, then the name.
    near = member("validation", "v/near.jpg")
    far, close = member("train", "t/a_far.jpg"), member("train", "t/b_close.jpg")
    pairs = duplicates.report_order([Group(NEAR, (far, near), 4), Group(NEAR, (close, near), 3)])
    (leak,), leaking = duplicates.leaks_of(pairs, "train")
    assert (leak.original, leak.distance) == (close, 3) and leaking == set(pairs)
    # A pair of two training images, one with a held-out exact copy, leaks nothing itself.
    twin = member("validation", "v/a_far_copy.jpg")
    groups = duplicates.report_order([Group(EXACT, (far, twin)), Group(NEAR, (far, close), 2)])
    leaks, leaking = duplicates.leaks_of(groups, "train")
    assert [(x.member, x.kind) for x in leaks] == [(twin, EXACT)] and leaking == {groups[0]}
    # VOC's training split is trainval; a build without one has no leaks.
    voc = [Group(EXACT, (member("test", "a.jpg"), member("trainval", "b.jpg")))]
    assert [leak.member.split for leak in duplicates.leaks_of(voc, "trainval")[0]] == ["test"]
    assert duplicates.leaks_of(voc, "train") == ([], set())
    assert duplicates.leaks_of(groups, None) == ([], set())
    one = duplicates.leak_list(duplicates.leaks_of(voc, "trainval")[0])[0]
    assert one == "1 test image copies a training image: a.jpg copies b.jpg (exact copy)"


def voc_with_a_leak(root):
    """A VOC2007 tree (trainval and test lists) whose test image 3 is trainval image 1's bytes."""
    year = root / "VOCdevkit" / "VOC2007"
    photos = six_photos(root / "photos")
    for number, path in enumerate(sorted(photos.rglob("*.jpg"))):
        image = Image.open(path)
        write(year / "JPEGImages" / f"{number}.jpg", path.read_bytes())
        xml = voc_xml([(path.parent.name, 1, 1, image.width - 1, image.height - 1)], image.size)
        write(year / "Annotations" / f"{number}.xml", xml)
    shutil.copy(year / "JPEGImages" / "1.jpg", year / "JPEGImages" / "6.jpg")
    shutil.copy(year / "Annotations" / "1.xml", year / "Annotations" / "6.xml")
    write(year / "ImageSets" / "Main" / "trainval.txt", "0\n1\n2\n3\n")
    write(year / "ImageSets" / "Main" / "test.txt", "4\n5\n6\n")
    return root / "VOCdevkit"


def test_voc_s_trainval_is_the_training_split_whose_copies_leak(tmp_path):
    """`--splits trainval,test` (VOC07's protocol): fail passed and drop_leaks dropped nothing."""
    devkit = voc_with_a_leak(tmp_path / "voc")
    splits = ("--splits", "trainval,test")
    info = build(devkit, tmp_path / "report", *splits, "--duplicates", "report")
    assert info.duplicates["leaked"] == {"test": 1}
    assert [row[2] for row in reported(tmp_path / "report")] == [True]
    info = build(devkit, tmp_path / "drop", *splits, *DROP)
    assert [(d[0], d[1], d[2]) for d in dropped(tmp_path / "drop", devkit)] == [
        ("test", "VOC2007/JPEGImages/6.jpg", "duplicate")
    ]
    assert info.splits["test"].num_examples == 2
    with pytest.raises(BuildFailed, match="1 test image copies a training image: VOC2007/"):
        build(devkit, tmp_path / "fail", *splits, "--duplicates", "fail")


def test_a_resumed_drop_leaks_build_checks_again_against_the_training_images_of_now(
    tree,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    # Stopped before its commit, then train/cat/a.jpg deleted: the resumed build kept the
    # validation shard that left out its copy ("a copy of ... a.jpg", a file gone), exit 0.
    import sys

    from beam_pipeline.output import commit

    root, out = tmp_path / "tree", tmp_path / "out"
    shutil.copytree(tree, root)
    argv = ["--input_dir", str(root), "--output_dir", str(out), "--quiet", *DROP]
    argv += ["--direct_running_mode", "in_memory"]
    with monkeypatch.context() as patch:
        patch.setattr(commit, "commit", lambda *a, **k: sys.exit("stopped before the commit"))
        with pytest.raises(SystemExit):
            build_tool.main(argv)
    assert any(out.glob(".progress/validation-*.json"))
    (root / "train/cat/a.jpg").unlink()
    assert build_tool.main([*argv, "--resume"]) == 0
    assert "val/cat/a_copy.jpg" not in {path for _, path, _, _ in dropped(out, root)}
    clean = tmp_path / "clean"
    assert build_tool.main([*argv[:2], *argv[4:], "--output_dir", str(clean)]) == 0
    for shard in clean.glob("*.tfrecord"):
        assert (out / shard.name).read_bytes() == shard.read_bytes(), shard.name
