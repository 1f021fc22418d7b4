"""Class folders as they are (Keras's `image_dataset_from_directory` layout): a folder per
class, or split folders of them, built without links or copies."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata

import pytest
from helpers import build, dead_letters, jpeg_bytes, png_bytes, read_split, write

from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import verify
from beam_pipeline.tree import folder_trees, folders, layouts, locate
from beam_pipeline.tree.folders import has_files, subdirectories
from beam_pipeline.tree.layouts import LayoutError
from loaders import dataset_info
from schemas import BUILD_INFO_FILE, SCHEMA_VERSION
from schemas import features as F

NAMES = "train, training, val, valid, validation, test, testing"
COLOURS = {"cat": (200, 30, 30), "dog": (30, 30, 200), "Ant": (30, 200, 30)}


def photos(root, splits=("",), classes=("cat", "dog"), per_class=2):
    for split in splits:
        for name in classes:
            for number in range(per_class):
                write(root / split / name / f"{number}.jpg", jpeg_bytes(colour=COLOURS[name]))
    return root


def labels(output_dir, split):
    return sorted((e[F.FILENAME][0].decode(), e[F.LABEL][0]) for e in read_split(output_dir, split))


def test_a_folder_of_class_folders_builds_as_it_is(tmp_path):
    # A laptop user's photos: cat/ and dog/. Keras's image_dataset_from_directory takes them
    # as they are; so does the build: one train split, each image its folder's class.
    root = photos(tmp_path / "photos")
    info = build(root, tmp_path / "out")
    assert info.classes == ("cat", "dog") and tuple(info.splits) == ("train",)
    assert labels(tmp_path / "out", "train") == [
        ("cat/0.jpg", 0),
        ("cat/1.jpg", 0),
        ("dog/0.jpg", 1),
        ("dog/1.jpg", 1),
    ]
    metadata = json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())
    assert metadata["source"]["layout"] == "class_folders"
    assert metadata["options"]["splits"] == ["train"]
    assert info.splits["train"].label_sources == {"folder": 4}


def test_the_classes_are_keras_class_names(tmp_path):
    keras = pytest.importorskip("keras")
    root = photos(tmp_path / "photos", classes=("dog", "cat", "Ant"), per_class=1)
    info = build(root, tmp_path / "out")
    keras_names = keras.utils.image_dataset_from_directory(str(root), batch_size=2).class_names
    assert list(info.classes) == keras_names == ["Ant", "cat", "dog"]


def test_split_folders_of_class_folders_are_the_splits(tmp_path):
    root = photos(tmp_path / "photos", splits=("train", "val", "test"))
    info = build(root, tmp_path / "out")
    assert sorted(info.splits) == ["test", "train", "validation"]
    for split in ("train", "validation", "test"):
        folder = "val" if split == "validation" else split
        assert labels(tmp_path / "out", split) == [
            (f"{folder}/cat/0.jpg", 0),
            (f"{folder}/cat/1.jpg", 0),
            (f"{folder}/dog/0.jpg", 1),
            (f"{folder}/dog/1.jpg", 1),
        ]
    # --splits picks among them; the others are named as not built.
    info = build(root, tmp_path / "out2", "--splits", "train")
    assert list(info.splits) == ["train"]


def test_a_download_folder_around_the_class_folders_is_looked_into(tmp_path):
    # Kaggle's flowers: flowers/flowers/{daisy,rose}: the one folder is no class.
    photos(tmp_path / "download" / "flowers")
    info = build(tmp_path / "download", tmp_path / "out")
    assert info.classes == ("cat", "dog")
    assert labels(tmp_path / "out", "train")[0] == ("cat/0.jpg", 0)


def test_training_and_testing_folders_are_the_splits(tmp_path):
    # Kaggle's brain MRI: Training/, Testing/. Built as two classes named after the splits
    # (exit 0, a note): a model learnt which folder an image came from.
    root = photos(tmp_path / "mri", splits=("Training", "Testing"))
    info = build(root, tmp_path / "out")
    assert info.classes == ("cat", "dog") and sorted(info.splits) == ["test", "train"]
    assert labels(tmp_path / "out", "test") == [
        ("Testing/cat/0.jpg", 0),
        ("Testing/cat/1.jpg", 0),
        ("Testing/dog/0.jpg", 1),
        ("Testing/dog/1.jpg", 1),
    ]


def test_class_folders_named_like_splits_are_refused_with_the_links_that_make_splits(tmp_path):
    # Kaggle's Intel scenes: seg_train/seg_train/<class>/, seg_test/seg_test/<class>/,
    # seg_pred/seg_pred/ (unlabelled). Built as the classes seg_pred, seg_test and seg_train
    # (exit 0, no word): each image labelled with its split.
    root = tmp_path / "intel scenes"
    photos(root, splits=("seg_train/seg_train", "seg_test/seg_test"))
    write(root / "seg_pred" / "seg_pred" / "0.jpg", jpeg_bytes())
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out")
    train, test = root / "seg_train" / "seg_train", root / "seg_test" / "seg_test"
    links = f"ln -s '{train}' TREE/train && ln -s '{test}' TREE/test"
    assert str(error.value) == (
        f"the class folders of {root} (seg_pred/, seg_test/, seg_train/) are named like split "
        "folders: built as classes, each image would be labelled with the split it lies in. If "
        f"they are splits, lay them out as split folders (mkdir TREE && {links}) and build "
        f"--input_dir TREE, or pass one split's class folders as --input_dir ({train}); if they "
        "are classes, rename them"
    )
    assert not (tmp_path / "out").exists()
    # The advice, followed: two splits of the two classes.
    subprocess.run(f"mkdir TREE && {links}", shell=True, cwd=tmp_path, check=True)
    info = build(tmp_path / "TREE", tmp_path / "out")
    assert info.classes == ("cat", "dog") and sorted(info.splits) == ["test", "train"]
    assert labels(tmp_path / "out", "train")[::2] == [
        ("train/cat/0.jpg", 0),
        ("train/dog/0.jpg", 1),
    ]
    assert build(train, tmp_path / "out2").classes == ("cat", "dog")


@pytest.mark.parametrize(
    "names",
    [("TRAIN_SET", "TEST_SET"), ("trainset", "valset"), ("data-training", "data-Validation")],
)
def test_class_folders_of_split_words_with_one_decoration_are_refused(tmp_path, names):
    root = tmp_path / "photos"
    for name in names:
        write(root / name / "0.jpg", jpeg_bytes())
    with pytest.raises(LayoutError, match=r"are named like split folders"):
        build(root, tmp_path / "out")


@pytest.mark.parametrize(
    "names", [("test_tube", "train_set"), ("trainval", "testing_kit"), ("train_set", "val_sets")]
)
def test_classes_that_hold_split_words_otherwise_are_classes(tmp_path, names):
    root = tmp_path / "photos"
    for name in names:
        write(root / name / "0.jpg", jpeg_bytes())
    assert build(root, tmp_path / "out").classes == tuple(sorted(names))


def test_split_folders_beside_other_folders_are_refused(tmp_path):
    root = photos(tmp_path / "photos", splits=("train", "val"))
    photos(root, classes=("Ant",), per_class=1)
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out")
    assert str(error.value) == (
        f"{root} holds split folders (train/, val/) beside other folders (Ant/): a build cannot "
        "tell whether those are classes. Move each class folder into the split it belongs to, "
        "or pass one split folder as --input_dir; or, if train/ is a class, rename it (a class "
        f"folder cannot take a split's name: {NAMES})"
    )
    assert not (tmp_path / "out").exists()


def test_a_dev_folder_beside_split_folders_is_named_as_a_validation_split_to_rename(tmp_path):
    # train/, dev/, test/ (a common layout elsewhere): the refusal did not say dev/ is no
    # split name here, nor what to rename it.
    root = photos(tmp_path / "photos", splits=("train", "dev", "test"))
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out")
    assert str(error.value) == (
        f"{root} holds split folders (train/, test/) beside other folders (dev/): a build cannot "
        "tell whether those are classes. If dev/ is a validation split, rename it val/ (a split "
        f"folder's names: {NAMES}); if it is a class, move each class folder into the split it "
        "belongs to, or pass one split folder as --input_dir; or, if train/ is a class, rename "
        f"it (a class folder cannot take a split's name: {NAMES})"
    )


def test_a_split_the_tree_does_not_have_is_refused_with_the_flag(tmp_path):
    root = photos(tmp_path / "photos")
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out", "--splits", "train,val")
    assert str(error.value) == (
        f"--splits val: {root} holds no split folders (train/, val/, test/): its images are "
        "one split, train (the default; hold out a validation split with "
        "--validation_split 0.2) or test (--splits test)"
    )
    nested = photos(tmp_path / "nested", splits=("train", "val"))
    with pytest.raises(LayoutError) as error:
        build(nested, tmp_path / "out", "--splits", "train,test")
    assert str(error.value) == (
        f"split 'test' has no folder in {nested}: the splits there are ['train', 'val']: choose "
        "with --splits train,val"
    )


def test_class_folders_that_differ_only_in_spaces_are_refused(tmp_path, capsys):
    # 'cat' and 'cat ' (a trailing space from a file manager) were two classes, exit 0.
    root = photos(tmp_path / "photos")
    write(root / "cat " / "0.jpg", jpeg_bytes())
    argv = ["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main(argv) == 1
    assert (
        "names classes that differ only in case, spaces, invisible characters or Unicode form: "
        "'cat' and 'cat '; a "
        "build would make each a class of its own" in capsys.readouterr().err
    )
    assert not (tmp_path / "out" / "labels.txt").exists()


def test_a_class_folder_whose_name_a_label_file_cannot_hold_is_refused(tmp_path, capsys):
    # 'dog\nx' made labels.txt (and TFDS's label files) two lines for one class; exit 0.
    root = photos(tmp_path / "photos")
    write(root / "dog\nx" / "0.jpg", jpeg_bytes())
    argv = ["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main(argv) == 1
    assert (
        "BUILD FAILED: the train split's annotations or folders: the class name 'dog\\nx' holds "
        "the control character '\\n': the build's label files" in capsys.readouterr().err
    )
    assert not (tmp_path / "out" / "labels.txt").exists()


def test_a_class_left_without_images_is_named_in_the_summary(tmp_path, capsys):
    # Every image of zzz was rejected: "3 classes", exit 0, and no word of it.
    root = photos(tmp_path / "photos", per_class=3)
    write(root / "zzz" / "0.jpg", jpeg_bytes()[:200])
    argv = ["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main([*argv, "--max_bad_fraction", "0.2"]) == 0
    lines = " ".join(capsys.readouterr().out.split())  # (the summary, folded)
    assert (
        "3 classes (no image is background) Warning: no training image is labelled zzz (an "
        "image's label is its class folder): a classifier trained on this build never learns "
        "it; rejected.jsonl lists the images left out" in lines
    )
    assert "Note: no" not in lines  # (no held-out split)


def test_an_empty_class_folder_is_refused_with_the_fix_that_keeps_it_as_keras_does(
    tmp_path, capsys
):
    # The fix named ImageNet's LOC_synset_mapping.txt, meaningless to a folder of photos.
    root = photos(tmp_path / "photos", classes=("Ant", "cat", "dog"))
    (root / "dog" / "0.jpg").unlink(), (root / "dog" / "1.jpg").unlink()
    argv = ["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: split 'train': 1 class in {root} holds no image (dog): a build would leave "
        "it out of the vocabulary (the classes seen in train) and number the classes after it "
        "lower than other builds of the dataset do. Put each class's images in its folder, "
        "remove what is not wanted, or pass --labels_file (a file with a class folder's name a "
        "line, in code-point order as Keras sorts them (LC_ALL=C ls), or a build's labels.txt: "
        "an empty class then has 0 images, as in Keras's class_names) to keep every class's "
        "index\n"
    )
    write(tmp_path / "classes.txt", b"Ant\ncat\ndog\n")
    assert build_tool.main([*argv, "--labels_file", str(tmp_path / "classes.txt")]) == 0
    info = dataset_info(tmp_path / "out")
    assert list(info.class_names) == ["Ant", "cat", "dog"]
    assert info.split("train").class_counts[:3] == (2, 2, 0)


def test_the_empty_class_fix_keeps_a_class_folder_whose_name_holds_a_space(tmp_path):
    # `LC_ALL=C ls` as --labels_file, as the refusal says: a line is a class's first word, so
    # `sea lion` read as class `sea` and the build failed (exit 1), telling to rename it.
    root = photos(tmp_path / "photos", classes=("cat",))
    for number in range(2):
        write(root / "sea lion" / f"{number}.jpg", jpeg_bytes(colour=(9, 9, 9)))
    (root / "dog").mkdir()
    listed = subprocess.run(["ls"], cwd=root, env={"LC_ALL": "C"}, capture_output=True)
    write(tmp_path / "classes.txt", listed.stdout)
    info = build(root, tmp_path / "out", "--labels_file", str(tmp_path / "classes.txt"))
    assert info.classes == ("cat", "dog", "sea lion") and not info.display_names
    assert labels(tmp_path / "out", "train")[2:] == [("sea lion/0.jpg", 2), ("sea lion/1.jpg", 2)]
    # A line that is no folder's name is still its first word and the rest its display name.
    write(tmp_path / "named.txt", b"cat Felis catus\ndog\nsea lion\n")
    info = build(root, tmp_path / "out2", "--labels_file", str(tmp_path / "named.txt"))
    assert info.classes == ("cat", "dog", "sea lion")
    assert info.display_names == {"cat": "Felis catus"}


def test_a_decomposed_class_folder_is_found_by_its_composed_name(tmp_path, capsys):
    # macOS writes `café` decomposed (NFD), a person types it composed (NFC): `inspect
    # --filename café/1.jpg` found no record, and `show --class café` said "unknown class
    # 'café' ... did you mean café?".
    from beam_pipeline.output.readback import read_build_info
    from beam_pipeline.tools import inspect_record
    from beam_pipeline.tools.build_records import class_label

    stored, typed = unicodedata.normalize("NFD", "café"), "café"
    assert stored != typed
    root = photos(tmp_path / "photos", classes=("dog",))
    for number in range(2):
        write(root / stored / f"{number}.jpg", jpeg_bytes())
    info = build(root, tmp_path / "out")
    assert info.classes == (stored, "dog")
    shard = next((tmp_path / "out").glob("*.tfrecord"))
    for where in (tmp_path / "out", shard):
        assert inspect_record.main([str(where), "--filename", f"{typed}/1.jpg"]) == 0
        assert f"image/filename: {stored}/1.jpg" in capsys.readouterr().out.splitlines()
    assert class_label(read_build_info(str(tmp_path / "out")), typed) == 0


def test_the_output_inside_the_class_folders_is_refused(tmp_path):
    root = photos(tmp_path / "photos")
    with pytest.raises(ValueError, match="lies inside the input tree"):
        build(root, root / "out")
    with pytest.raises(ValueError, match="lies inside the input tree"):  # (was accepted)
        build(root, root)
    assert sorted(p.name for p in root.iterdir()) == ["cat", "dog"]


def test_an_image_beside_the_class_folders_is_rejected_by_name(tmp_path):
    root = photos(tmp_path / "photos", per_class=3)
    write(root / "stray.jpg", jpeg_bytes())
    info = build(root, tmp_path / "out", "--max_bad_fraction", "0.2")
    assert info.splits["train"].num_examples == 6
    (rejected,) = dead_letters(tmp_path / "out")
    assert (rejected["path"], rejected["reason"]) == (str(root / "stray.jpg"), "no_class")
    assert "move it into its class's folder or remove it" in rejected["detail"]


@pytest.mark.parametrize(
    ("files", "holds"), [(["1.xml", "2.xml"], "annotations (.xml) but "), (["notes.txt"], "")]
)
def test_a_folder_without_images_is_said_to_hold_none(tmp_path, files, holds):
    # It was told "its images lie in no class folder".
    for name in files:
        write(tmp_path / "in" / "sub" / name, "<annotation/>")
    with pytest.raises(LayoutError) as error:
        build(tmp_path / "in", tmp_path / "out")
    assert str(error.value).endswith(
        f"; it holds {holds}no image file (.bmp, .gif, .jfif, .jpe, .jpeg, .jpg, .png, .tif, "
        ".tiff, .webp): copy the images in (beside their XML, or a folder per class)"
    )


def test_a_flat_folder_of_images_builds_unlabelled_with_the_flags_the_refusal_names(tmp_path):
    root = tmp_path / "photos"
    for number in range(3):
        write(root / f"{number}.jpg", jpeg_bytes())
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out")
    flags = "--layout class_folders --splits test --labels_file CLASSES.txt"
    assert str(error.value).endswith(
        "; its images lie in no class folder (a folder per class, as Keras's "
        "image_dataset_from_directory reads, labels them). Without labels it builds as an "
        f"unlabelled test split, with your model's classes: {flags}"
    )
    write(tmp_path / "CLASSES.txt", "cat\ndog\n")
    info = build(
        root, tmp_path / "out", *flags.replace("CLASSES", str(tmp_path / "CLASSES")).split()
    )
    assert info.splits["test"].num_examples == 3 and not info.splits["test"].labelled
    assert [e[F.LABEL] for e in read_split(tmp_path / "out", "test")] == [[-1]] * 3


def test_an_xml_that_annotates_no_image_leaves_the_class_folders_as_they_are(tmp_path):
    # A CVAT export's one annotations.xml beside the class folders made the tree "VOC XML",
    # which then failed: "the train split names no class".
    root = photos(tmp_path / "photos")
    write(root / "annotations.xml", b'<?xml version="1.0"?><annotations></annotations>')
    info = build(root, tmp_path / "out")
    assert info.classes == ("cat", "dog") and info.splits["train"].num_examples == 4
    found = [(r["reason"], r["path"]) for r in dead_letters(tmp_path / "out")]
    assert found == [("not_an_image_file", str(root / "annotations.xml"))]
    write(root / "cat" / "0.xml", b"<annotation/>")  # named as an image is: its annotation
    assert locate.locate_tree(str(root), layouts.AUTO, has_files, subdirectories)[1] == "voc_xml"


def test_two_photos_of_one_name_but_the_extension_are_both_built(tmp_path):
    # IMG_0001.jpg and IMG_0001.png: both rejected as "ambiguous" once, though no XML was
    # there to be ambiguous about.
    root = photos(tmp_path / "photos", per_class=1)
    write(root / "cat" / "0.png", png_bytes())
    write(root / "cat" / "0.JPG", jpeg_bytes())
    build(root, tmp_path / "out")
    assert labels(tmp_path / "out", "train") == [
        ("cat/0.JPG", 0),
        ("cat/0.jpg", 0),
        ("cat/0.png", 0),
        ("dog/0.jpg", 1),
    ]
    assert dead_letters(tmp_path / "out") == []


def test_layout_class_folders_is_taken_as_named(tmp_path):
    # A folder named images/ is a class when the user says the tree is class folders.
    root = photos(tmp_path / "photos", classes=("cat",))
    write(root / "images" / "0.jpg", jpeg_bytes())
    with pytest.raises(LayoutError, match="annotations in a layout this tool does not read"):
        build(root, tmp_path / "out")
    info = build(root, tmp_path / "out", "--layout", "class_folders")
    assert info.classes == ("cat", "images")


def test_num_shards_is_checked_against_the_splits_the_tree_gives(tmp_path):
    # --splits left out: the splits are the tree's, and --num_shards may name only those.
    root = photos(tmp_path / "photos")
    with pytest.raises(ValueError) as error:
        build(root, tmp_path / "out", "--num_shards", "train=1,val=1")
    assert str(error.value) == (
        "--num_shards names ['validation'], which this build does not write; its splits are "
        "['train'] (--splits train; val is written as validation)"
    )


def test_stats_says_no_image_is_background(tmp_path):
    build(photos(tmp_path / "photos"), tmp_path / "out")
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "stats", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        f"{tmp_path / 'out'}: 2 classes (no image is background), schema {SCHEMA_VERSION}"
    )


def in_no_split(path) -> dict:
    """The `rejected.jsonl` line of an image beside the split folders."""
    return {
        "split": "",
        "path": str(path),
        "stage": "discover",
        "reason": "in_no_split",
        "detail": "an image beside the split folders, in no split: not built; to build it, "
        "move it into the split folder it belongs to",
        "is_image": False,
    }


def test_images_beside_the_split_folders_are_named_as_not_built(tmp_path, capsys):
    # They are in no split: once, the build left them out without a word; then the console
    # and plan named them, but not the build's own account (rejected.jsonl, failures).
    root = photos(tmp_path / "photos", splits=("train", "val"), per_class=1)
    for name in ("a.jpg", "b.PNG", "c.jpg", "d.jpg"):
        write(root / name, jpeg_bytes())
    write(root / "README.txt", b"not an image")
    assert build_tool.main(["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]) == 0
    info = dataset_info(tmp_path / "out")
    assert [info.split(s).num_examples for s in ("train", "validation")] == [2, 2]
    assert [info.split(s).num_rejected for s in ("train", "validation")] == [0, 0]
    assert info.info.failures == {"in_no_split": 4}
    names = ("a.jpg", "b.PNG", "c.jpg", "d.jpg")
    assert dead_letters(tmp_path / "out") == [in_no_split(root / name) for name in names]
    assert verify.main([str(tmp_path / "out"), "--workers", "1"]) == 0
    note = (
        f"Not built: 4 images in {root} beside its split folders, in no split (a.jpg, b.PNG, "
        "c.jpg and 1 more); to build them, move them into the split folder each belongs to"
    )
    assert note in capsys.readouterr().err.splitlines()
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "plan", "--input_dir", str(root)],
        capture_output=True,
        text=True,
    )
    assert note in done.stdout.splitlines()
    assert [line for line in done.stdout.splitlines() if "in_no_split" in line] == [
        f"  {root}/{name}: in_no_split: {in_no_split(root / name)['detail']}" for name in names
    ]
    (root / "b.PNG").unlink(), (root / "c.jpg").unlink(), (root / "d.jpg").unlink()
    build_tool.main(["--input_dir", str(root), "--output_dir", str(tmp_path / "out2")])
    assert (
        f"Not built: 1 image in {root} beside its split folders, in no split (a.jpg); to build "
        "it, move it into the split folder it belongs to"
    ) in capsys.readouterr().err.splitlines()


def test_a_label_table_beside_the_split_folders_is_said_to_be_unread(tmp_path, capsys):
    # TFRecorder's data.csv beside train/ and val/: once neither listed nor mentioned.
    root = photos(tmp_path / "photos", splits=("train", "val"), per_class=1)
    write(root / "data.csv", b"split,image_uri,label\nTRAIN,train/cat/0.jpg,dog\n")
    write(root / "extra.TSV", b"x")
    assert build_tool.main(["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]) == 0
    note = (
        f"Note: not read: data.csv, extra.TSV in {root} beside its split folders; labels come "
        "from the class folders, not from a table"
    )
    assert note in capsys.readouterr().err.splitlines()
    assert labels(tmp_path / "out", "train")[0] == ("train/cat/0.jpg", 0)
    flat = photos(tmp_path / "flat", per_class=1)  # listed there: reported as not an image
    write(flat / "data.csv", b"x")
    assert build_tool.main(["--input_dir", str(flat), "--output_dir", str(tmp_path / "o2")]) == 0
    assert "not read" not in capsys.readouterr().err
    assert [r["reason"] for r in dead_letters(tmp_path / "o2")] == ["not_an_image_file"]


def test_split_folders_inside_class_folders_are_built_into_the_split_and_said(tmp_path, capsys):
    # cat/train/, cat/val/: built as Keras reads them, all of them train; once without a word.
    root = tmp_path / "photos"
    for name in ("cat", "dog"):
        photos(root / name, splits=("train", "val"), classes=("Ant",), per_class=1)
    assert build_tool.main(["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]) == 0
    assert labels(tmp_path / "out", "train") == [
        ("cat/train/Ant/0.jpg", 0),
        ("cat/val/Ant/0.jpg", 0),
        ("dog/train/Ant/0.jpg", 1),
        ("dog/val/Ant/0.jpg", 1),
    ]
    assert (
        "Note: 4 split folders inside class folders (cat/train/, cat/val/, dog/train/ and 1 "
        "more): their images are built into the split with the rest, each labelled by its class "
        "folder; to build them as splits, arrange the tree as train/CLASS/, val/CLASS/"
    ) in capsys.readouterr().err.splitlines()


def test_a_folder_of_class_folder_trees_builds_a_class_each_and_names_the_trees(tmp_path, capsys):
    # flowers/roses/, pets/cat/: two datasets given as one tree built as classes flowers and
    # pets (as Keras reads them) without a word.
    root = tmp_path / "datasets"
    photos(root / "flowers", classes=("cat", "dog"), per_class=1)
    photos(root / "pets", classes=("Ant", "dog"), per_class=1)
    assert build_tool.main(["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]) == 0
    assert labels(tmp_path / "out", "train") == [
        ("flowers/cat/0.jpg", 0),
        ("flowers/dog/0.jpg", 0),
        ("pets/Ant/0.jpg", 1),
        ("pets/dog/0.jpg", 1),
    ]
    assert (
        f"Note: every class folder of {root} holds folders of images, no image of its own "
        "(flowers/cat/, flowers/dog/, pets/Ant/ and 1 more): each is built as one class "
        "(flowers, pets), its images those of all its folders, as Keras reads them; if the "
        f"folders inside are the classes, pass one of {root}/flowers, {root}/pets as --input_dir"
    ) in capsys.readouterr().err.splitlines()
    # A class folder with an image of its own, or with one folder inside, is a class.
    access = folders.TREE_ACCESS
    write(root / "pets" / "1.jpg", jpeg_bytes())
    assert folder_trees.plan_class_folders(str(root), ("train",), access).notes == ()
    (root / "pets" / "1.jpg").unlink()
    (root / "pets" / "Ant" / "0.jpg").unlink()
    assert folder_trees.plan_class_folders(str(root), ("train",), access).notes == ()


def test_plan_counts_images_by_class_folder(tmp_path):
    root = photos(tmp_path / "photos")
    write(root / "stray.jpg", jpeg_bytes())
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "plan", "--input_dir", str(root)],
        capture_output=True,
        text=True,
    )
    assert "train (class_folders):\n  images 5: in a class folder 4, outside any 1\n" in done.stdout


@pytest.mark.parametrize("named", [layouts.VOC, layouts.ILSVRC_DET, layouts.ILSVRC_CLS_LOC])
def test_another_layout_named_on_class_folders_is_refused_naming_them(tmp_path, named):
    # It said the images "lie in no class folder" and proposed an unlabelled test split.
    root = photos(tmp_path / "photos")
    with pytest.raises(LayoutError) as error:
        locate.locate_tree(str(root), named, has_files, subdirectories)
    assert str(error.value) == (
        f"{root} holds the layout 'class_folders', not '{named}': pass --layout class_folders "
        "or leave --layout out (it is detected)"
    )


def test_an_object_store_folder_names_the_folder_layouts():
    with pytest.raises(LayoutError) as error:
        locate.locate_tree("gs://bucket/photos", layouts.AUTO, lambda path: path.endswith("os"))
    assert str(error.value).endswith(
        "; folders of classes, or of images with their VOC XML, are not detected in an object "
        "store: name them with --layout class_folders or --layout voc_xml"
    )
    classes = ("gs://bucket/photos/cat", "gs://bucket/photos/dog")
    found = locate.locate_tree("gs://bucket/photos", layouts.CLASS_FOLDERS, classes.__contains__)
    assert found == ("gs://bucket/photos", layouts.CLASS_FOLDERS)


def test_a_class_folder_named_with_a_trailing_space_is_named_when_a_labels_file_drops_it(tmp_path):
    # labels.txt of a build whose folder is "cat " reads back as "cat": the rebuild refused
    # every "cat " image as an unknown class without saying why the labels file cannot hold it.
    from beam_pipeline.failures import BuildFailed

    root = photos(tmp_path / "photos")
    (root / "cat").rename(root / "cat ")
    (tmp_path / "labels.txt").write_text("cat \ndog\n")
    with pytest.raises(BuildFailed) as error:
        build(root, tmp_path / "out", "--labels_file", str(tmp_path / "labels.txt"))
    assert (
        "most frequent first: {'cat ': 2} ('cat ' begins or ends with a space, which a labels "
        "file's line does not keep: such a class cannot be listed there; rename it)"
    ) in str(error.value)
    # The same for a class beginning with # (a copy of labels.txt reads its line as a comment).
    (root / "cat ").rename(root / "#1")
    (tmp_path / "labels.txt").write_text("#1\ndog\n")
    with pytest.raises(BuildFailed) as error:
        build(root, tmp_path / "out", "--labels_file", str(tmp_path / "labels.txt"))
    assert (
        "('#1' begins with #, and a labels file's line that does is a comment: such a class "
        "cannot be listed there; rename it)"
    ) in str(error.value)


def test_splits_named_in_lower_case_take_the_split_folders_of_any_case_and_name(tmp_path):
    # TRAIN/, VALIDATION/, TEST/ (TFRecorder's sample): built without --splits, but
    # `--splits train,val` was refused ("split 'train' has no folder").
    from beam_pipeline.tree import planner
    from beam_pipeline.tree.folders import TREE_ACCESS

    root = photos(tmp_path / "photos", splits=("TRAIN", "VALIDATION", "TEST"), per_class=1)
    plan = planner.plan_discovery(str(root), layouts.CLASS_FOLDERS, ("train", "val"), TREE_ACCESS)
    assert plan.unbuilt == ("TEST",)  # (the note named all three)
    info = build(root, tmp_path / "out", "--splits", "train,val")
    assert tuple(info.splits) == ("train", "validation")
    assert labels(tmp_path / "out", "validation") == [
        ("VALIDATION/cat/0.jpg", 0),
        ("VALIDATION/dog/0.jpg", 1),
    ]


def test_a_builds_labels_txt_is_a_labels_file_even_where_its_classes_hold_spaces(tmp_path):
    # "golden retriever" and "golden doodle": the build's labels.txt lists both, but as a
    # --labels_file it was refused ("lists these classes twice: ['golden']").
    root = photos(tmp_path / "photos")
    (root / "cat").rename(root / "golden retriever")
    (root / "dog").rename(root / "golden doodle")
    first = build(root, tmp_path / "first")
    assert first.classes == ("golden doodle", "golden retriever")
    again = build(root, tmp_path / "again", "--labels_file", str(tmp_path / "first" / "labels.txt"))
    assert again.classes == first.classes
    assert labels(tmp_path / "again", "train") == labels(tmp_path / "first", "train")
    # A class folder named "item {" made the build's labels.txt read as a label map (a
    # protobuf parse error; an adversarial trial).
    (root / "golden doodle").rename(root / "item {")
    third = build(root, tmp_path / "third")
    assert third.classes == ("golden retriever", "item {")
    fourth = build(root, tmp_path / "fourth", "--labels_file", tmp_path / "third" / "labels.txt")
    assert fourth.classes == third.classes


def test_a_split_whose_every_image_is_rejected_is_not_committed_empty(tmp_path):
    # A builder trial: the error budget counts every split's images as one, so a validation
    # split whose one image was truncated committed empty, exit 0; verify said OK and the
    # loader yielded no batch at all.
    from beam_pipeline.failures import BuildFailed
    from loaders import load_dataset

    root = photos(tmp_path / "photos", splits=("train",), per_class=60)
    cut = jpeg_bytes()
    write(root / "val" / "cat" / "v1.jpg", cut[: len(cut) // 2])
    out = tmp_path / "out"
    with pytest.raises(BuildFailed) as failed:
        build(root, out, "--splits", "train,val")
    assert str(failed.value).startswith(
        "BUILD FAILED: split 'validation': all 1 images were rejected ({'truncated_image': 1}), "
        f"so it would hold none; see {out}/rejected.jsonl; mend them, or leave the split out "
        "(--splits)"
    )
    assert not (out / "build_info.json").exists()
    (line,) = dead_letters(out)
    assert line["path"].endswith("val/cat/v1.jpg") and line["reason"] == "truncated_image"

    # A build that committed such a split before: the loader refuses it by name.
    (root / "val" / "cat" / "v1.jpg").write_bytes(cut)
    build(root, out, "--splits", "train,val", "--overwrite")
    info = json.loads((out / "build_info.json").read_text())
    val = info["splits"]["validation"]
    (shard,) = val["shards"]
    (out / shard["file"]).write_bytes(b"")
    shard.update(num_examples=0, num_bytes=0)
    val.update(num_examples=0, num_rejected=1, class_counts=[0] * len(val["class_counts"]))
    val.update(label_sources={}, objects_per_image={}, image_widths={}, image_heights={})
    (out / "build_info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError) as refused:
        load_dataset(str(out), "validation", batch_size=4)
    assert str(refused.value) == (
        f"split 'validation' of {out} holds no image (1 rejected when it was built: "
        "rejected.jsonl names them), so an epoch would have no batch"
    )
