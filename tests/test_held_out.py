"""`--validation_split` and `--test_split`: a tree with only training images divided per class,
seeded, the same on every runner, recorded in build_info.json."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from helpers import build, ilsvrc_image, jpeg_bytes, read_split, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.core.entries import IndexEntry
from beam_pipeline.core.holdout import HoldOut
from beam_pipeline.failures import BuildFailed
from beam_pipeline.tools import plan as plan_tool
from schemas import BUILD_INFO_FILE
from schemas import features as F

SIZES = {"cat": 10, "dog": 7, "Ant": 1}
COLOURS = {"cat": (200, 30, 30), "dog": (30, 30, 200), "Ant": (30, 200, 30)}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    for name, count in SIZES.items():
        for number in range(count):
            write(root / name / f"{number}.jpg", jpeg_bytes(colour=COLOURS[name]))
    return root


def members(output_dir) -> dict[str, set[tuple[str, int]]]:
    info = json.loads((output_dir / BUILD_INFO_FILE).read_text())
    return {
        split: {(e[F.FILENAME][0].decode(), e[F.LABEL][0]) for e in read_split(output_dir, split)}
        for split in info["splits"]
    }


def test_counts_round_each_fraction_and_keep_one_training_image():
    spec = HoldOut("train", (("validation", 0.2), ("test", 0.1)))
    assert [spec.counts(n) for n in (0, 1, 2, 7, 10, 1300)] == [
        (0, 0),
        (0, 0),
        (0, 0),
        (1, 1),  # 1.4 and 0.7, rounded half up
        (2, 1),
        (260, 130),
    ]
    greedy = HoldOut("train", (("validation", 0.5), ("test", 0.4)))
    assert greedy.counts(2) == (1, 0)  # 1 and 1 would leave train none: the last gives back
    assert greedy.counts(3) == (2, 0)  # 1.5 → 2, 1.2 → 1: train keeps 1 of 3
    # A trial's: halves in decimal that binary puts just below (31.499999999999996) went down.
    assert HoldOut("train", (("validation", 0.35),)).counts(90) == (32,)
    assert HoldOut("train", (("validation", 0.58),)).counts(25) == (15,)
    assert HoldOut("train", (("validation", 0.35),)).counts(89) == (31,)  # 31.15


def test_the_division_depends_on_names_and_seed_not_on_order():
    entries = [IndexEntry("train", f"k{n}", f"cat/{n}.jpg", None, "cat", 9) for n in range(50)]
    spec = HoldOut("train", (("validation", 0.2),), seed=3)

    def division(order):
        return sorted((entry.filename, entry.split) for entry in spec.assign(order))

    shuffled = entries[:]
    random.Random(1).shuffle(shuffled)
    assert division(entries) == division(shuffled)
    assert sum(split == "validation" for _, split in division(entries)) == 10
    other = HoldOut("train", (("validation", 0.2),), seed=4)
    assert {e.filename for e in other.assign(entries) if e.split == "validation"} != {
        filename for filename, split in division(entries) if split == "validation"
    }


def test_class_folders_divide_per_class(photos, tmp_path):
    info = build(photos, tmp_path / "out", "--validation_split", "0.2", "--test_split", "0.1")
    assert info.classes == ("Ant", "cat", "dog")
    counts = {name: split.class_counts for name, split in info.splits.items()}
    # cat 10 → 2 + 1, dog 7 → 1 + 1, Ant 1 stays in train; background column last.
    assert counts == {"train": (1, 7, 5, 0), "validation": (0, 2, 1, 0), "test": (0, 1, 1, 0)}
    found = members(tmp_path / "out")
    every = [member for split in found.values() for member in split]
    assert len(every) == len(set(every)) == 18  # each image once
    for filename, label in every:
        assert label == info.classes.index(filename.split("/")[0])
    metadata = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert metadata["options"]["held_out"] == {
        "from": "train",
        "fractions": {"validation": 0.2, "test": 0.1},
        "seed": 0,
        "stratified_by": "class (folder, or the XML's main object; background apart)",
    }
    # The shuffle's seed does not move an image between splits; the split seed does.
    build(photos, tmp_path / "reshuffled", "--validation_split", "0.2", "--test_split", "0.1",
          "--seed", "7")  # fmt: skip
    assert members(tmp_path / "reshuffled") == found
    # A held-out split takes a shard count of its own.
    reseeded = build(photos, tmp_path / "reseeded", "--validation_split", "0.2", "--split_seed",
                     "1", "--num_shards", "train=1,validation=2")  # fmt: skip
    assert members(tmp_path / "reseeded")["validation"] != found["validation"]
    assert [len(reseeded.splits[s].shards) for s in ("train", "validation")] == [1, 2]


def test_every_runner_divides_alike(photos, tmp_path):
    build(photos, tmp_path / "one", "--validation_split", "0.3")
    build(
        photos,
        tmp_path / "many",
        "--validation_split",
        "0.3",
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
    )
    assert members(tmp_path / "one") == members(tmp_path / "many")


def test_xml_trees_divide_by_the_main_object_and_negatives_apart(tmp_path):
    tree = tmp_path / "in"
    for number in range(10):
        # the dog's box is the larger: the image is a dog's
        xml = voc_xml([("cat", 1, 1, 10, 10), ("dog", 1, 1, 40, 40)] if number < 5 else
                      [("cat", 1, 1, 40, 40)])  # fmt: skip
        ilsvrc_image(tree, "train", f"ILSVRC2014_train_0000/{number}", jpeg_bytes(), xml)
    for number in range(5):
        ilsvrc_image(tree, "train", f"ILSVRC2013_train_extra0/neg{number}", jpeg_bytes())
    info = build(tree, tmp_path / "out", "--validation_split", "0.4")
    assert info.classes == ("cat", "dog")
    assert info.splits["validation"].class_counts == (2, 2, 2)  # 2 of 5 each, 2 negatives
    assert info.splits["train"].class_counts == (3, 3, 3)
    assert list(info.splits) == ["train", "validation"]


def test_a_held_out_split_of_negatives_only_is_background_as_they_are_in_train(tmp_path, capsys):
    # It was taken for a split without annotations: its images stored unlabelled (-1).
    tree = tmp_path / "in"
    for name in ("cat", "dog"):
        ilsvrc_image(tree, "train", f"ILSVRC2014_train_0000/{name}", jpeg_bytes(),
                     voc_xml([(name, 1, 1, 40, 40)]))  # fmt: skip
    for number in range(4):
        ilsvrc_image(tree, "train", f"ILSVRC2013_train_extra0/neg{number}", jpeg_bytes())
    info = build(tree, tmp_path / "out", "--validation_split", "0.5")
    assert info.splits["validation"].labelled and info.splits["validation"].class_counts == (
        0,
        0,
        2,
    )
    assert [e[F.LABEL] for e in read_split(tmp_path / "out", "validation")] == [[2], [2]]
    assert info.splits["train"].class_counts == (1, 1, 2)
    argv = ["--input_dir", str(tree), "--validation_split", "0.5", "--json"]
    assert plan_tool.main(argv) == 0
    planned = json.loads(capsys.readouterr().out)["splits"]["validation"]
    assert (planned["kind"], list(planned["class_counts"].values())) == ("annotated", [0, 0, 2])


def test_a_class_only_a_held_out_image_shows_stays_in_the_vocabulary(tmp_path, capsys):
    # A bicycle only beside a larger person, in one image: held out into validation, the
    # vocabulary (train's classes) lost it: every class after it renumbered, that image
    # rejected as unknown_class within the error budget, exit 0.
    tree = tmp_path / "in"
    for number in range(2):
        objects = [("person", 1, 1, 40, 40)] + ([("bicycle", 1, 1, 10, 10)] if number else [])
        ilsvrc_image(
            tree, "train", f"ILSVRC2014_train_0000/p{number}", jpeg_bytes(), voc_xml(objects)
        )
    for number in range(3):
        ilsvrc_image(tree, "train", f"ILSVRC2014_train_0000/c{number}", jpeg_bytes(),
                     voc_xml([("cat", 1, 1, 40, 40)]))  # fmt: skip
    for seed in range(10):  # (a seed that holds the bicycle's image out)
        out = tmp_path / f"out{seed}"
        info = build(tree, out, "--validation_split", "0.5", "--split_seed", str(seed))
        held = {e[F.FILENAME][0].decode() for e in read_split(out, "validation")}
        if "Data/DET/train/ILSVRC2014_train_0000/p1.JPEG" in held:
            break
    else:
        raise AssertionError("no seed held the bicycle's image out")
    assert info.classes == ("bicycle", "cat", "person")
    assert info.splits["validation"].num_examples == 3  # (cat 2 of 3, person 1 of 2)
    assert sum(split.num_rejected for split in info.splits.values()) == 0
    argv = ["--input_dir", str(tree), "--validation_split", "0.5", "--split_seed", str(seed)]
    assert plan_tool.main([*argv, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert (planned["num_classes"], planned["num_rejections"]) == (3, 0)


def test_a_split_the_tree_has_is_not_made_twice(tmp_path):
    tree = tmp_path / "in"
    for split in ("train", "val"):
        for name in ("n01", "n02"):
            ilsvrc_image(tree, split, f"{name}/{split}", jpeg_bytes(), task="CLS-LOC")
    with pytest.raises(ValueError) as error:
        build(tree, tmp_path / "out", "--splits", "train,val", "--validation_split", "0.2")
    assert str(error.value) == (
        "--validation_split makes the validation split, but --splits train,val also builds the "
        "tree's val as validation: leave val out of --splits, or drop --validation_split"
    )
    with pytest.raises(ValueError) as error:
        build(tree, tmp_path / "out", "--splits", "val", "--test_split", "0.2")
    assert str(error.value) == (
        "--test_split holds images out of the train split (or VOC's trainval), which --splits "
        "val does not build: add train to --splits"
    )
    # Left out, --splits is train alone. One image a class: every one stays in train.
    with pytest.raises(BuildFailed) as error:
        build(tree, tmp_path / "out", "--validation_split", "0.5")
    assert str(error.value).startswith(
        "BUILD FAILED: split 'validation' has no images: --validation_split 0.5 took none "
        "(each class gives round(images x 0.5), and keeps one image in train); raise "
        "--validation_split"
    )
    assert not (tmp_path / "out" / BUILD_INFO_FILE).exists()  # nothing committed
    # Found before any shard is written (it was found once every shard had been).
    assert not list((tmp_path / "out").glob("*.tfrecord"))


def test_the_tree_s_own_split_left_out_is_said_with_flags_that_build_it(tmp_path, capsys):
    # plan said "pass --splits train,val", which the build then refused (above).
    tree = tmp_path / "in"
    for split in ("train", "val"):
        for number in range(4):
            ilsvrc_image(tree, split, f"n01/{split}{number}", jpeg_bytes(), task="CLS-LOC")
    assert plan_tool.main(["--input_dir", str(tree), "--validation_split", "0.25"]) == 0
    assert (
        "Not built: the tree's val split (this build holds validation out of train); to build "
        "the tree's val in place of the held-out one, drop --validation_split and pass --splits "
        "train,val"
    ) in capsys.readouterr().out.splitlines()
    # A split the build does not hold out is built beside them: keep the flag (it said drop it).
    for number in range(2):
        ilsvrc_image(tree, "test", f"n01/test{number}", jpeg_bytes(), task="CLS-LOC")
    assert plan_tool.main(["--input_dir", str(tree), "--validation_split", "0.25"]) == 0
    assert (
        "Not built: the tree's test, val splits (this build holds validation out of train); pass "
        "--splits train,test to build it too; or to build the tree's val in place of the "
        "held-out one, drop --validation_split and pass --splits train,test,val"
    ) in capsys.readouterr().out.splitlines()
    argv = ["--input_dir", str(tree), "--validation_split", "0.25", "--splits", "train,test"]
    assert plan_tool.main(argv) == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ("--validation_split", "1"),
            "--validation_split must be a fraction in [0, 1), e.g. 0.2, not 1.0",
        ),
        (("--test_split", "-0.1"), "--test_split must be a fraction in [0, 1), e.g. 0.2, not -0.1"),
        (
            ("--validation_split", "0.5", "--test_split", "0.5"),
            "--validation_split 0.5 and --test_split 0.5 would hold out every training image: "
            "their sum must be below 1",
        ),
        (
            ("--split_seed", "5"),
            "--split_seed 5 seeds the splits --validation_split and --test_split hold out; this "
            "build holds none out: drop it, or add one",
        ),
    ],
)
def test_fractions_outside_0_1_are_refused(photos, tmp_path, flags, message):
    with pytest.raises(ValueError) as error:
        build(photos, tmp_path / "out", *flags)
    assert str(error.value) == message


def test_without_the_flags_build_info_has_no_held_out(photos, tmp_path):
    build(photos, tmp_path / "out")
    metadata = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert "held_out" not in metadata["options"]


def test_plan_divides_as_the_build_does(photos, tmp_path):
    flags = ["--validation_split", "0.2", "--test_split", "0.1"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "beam_pipeline",
            "plan",
            "--input_dir",
            str(photos),
            *flags,
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    planned = json.loads(done.stdout)["splits"]
    info = build(photos, tmp_path / "out", *flags)
    for name, split in info.splits.items():
        assert tuple(planned[name]["class_counts"].values()) == split.class_counts
