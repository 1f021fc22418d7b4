"""The label rules on the trees users have, end to end: never a silently wrong label.

CLS-LOC copies whose `val` was moved into synset folders (no XML), `test` splits without any
annotation, images lying outside the class folders, and classes named like the background class.
"""

import codecs
import json
import os
import re

import pytest
from helpers import (
    build,
    dead_letters,
    failure_line,
    ilsvrc_image,
    jpeg_bytes,
    read_split,
    summary_rows,
    write,
)

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import plan as plan_tool
from beam_pipeline.tools import verify
from schemas import BUILD_INFO_FILE, DatasetInfo
from schemas import features as F
from schemas.tfrecord import read_records

SYNSETS = ("n01440764", "n01443537")


def cls_loc(root, stem, split, data, xml=None):
    ilsvrc_image(root, split, stem, data, xml, task="CLS-LOC")


@pytest.fixture(scope="module")
def imagenet_copy(tmp_path_factory):
    """A CLS-LOC tree as most ImageNet copies are: val in synset folders, test unlabelled."""
    root = tmp_path_factory.mktemp("imagenet")
    for i, synset in enumerate(SYNSETS):
        colour = (200, 40 * i, 30)
        for n in range(3):
            cls_loc(root, f"{synset}/{synset}_{n}", "train", jpeg_bytes(colour=colour))
            cls_loc(root, f"{synset}/ILSVRC2012_val_{i}{n}", "val", jpeg_bytes(colour=colour))
    # One val image keeps its XML, which names the other class than its folder.
    cls_loc(
        root,
        f"{SYNSETS[0]}/ILSVRC2012_val_99",
        "val",
        jpeg_bytes(),
        voc_xml([(SYNSETS[1], 1, 1, 40, 30)], size=(64, 48)),
    )
    # One val image left directly in val/, outside any class folder.
    cls_loc(root, "ILSVRC2012_val_stray", "val", jpeg_bytes())
    for n in range(4):
        cls_loc(root, f"ILSVRC2012_test_{n:08d}", "test", jpeg_bytes(colour=(10, 10, 10 * n)))
    out = tmp_path_factory.mktemp("out")
    info = build(root, out, "--splits", "train,val,test", "--max_bad_fraction", "0.1")
    return root, out, info


def test_val_in_synset_folders_takes_the_folder_class(imagenet_copy):
    _, out, info = imagenet_copy
    labels = {
        example[F.FILENAME][0].decode(): (example[F.LABEL][0], example[F.LABEL_TEXT][0].decode())
        for example in read_split(out, "validation")
    }
    for i, synset in enumerate(SYNSETS):
        for n in range(3):
            assert labels[f"Data/CLS-LOC/val/{synset}/ILSVRC2012_val_{i}{n}.JPEG"] == (i, synset)
    # The XML wins over the folder, and the disagreement is counted.
    assert labels[f"Data/CLS-LOC/val/{SYNSETS[0]}/ILSVRC2012_val_99.JPEG"] == (1, SYNSETS[1])
    validation = info.splits["validation"]
    assert validation.label_sources == {"folder": 6, "xml": 1}
    assert validation.folder_disagreements == 1
    assert validation.class_counts == (3, 4, 0) and validation.labelled


def test_an_image_outside_the_class_folders_is_rejected_not_background(imagenet_copy):
    root, out, info = imagenet_copy
    (stray,) = [d for d in dead_letters(out) if d["reason"] == "no_class"]
    assert stray["path"] == f"{root}/Data/CLS-LOC/val/ILSVRC2012_val_stray.JPEG"
    assert (stray["split"], stray["stage"]) == ("validation", "label")
    assert info.splits["validation"].num_rejected == 1
    assert info.failures == {"no_class": 1, "folder_disagreement": 1}  # reported, not rejected
    assert info.splits["train"].label_sources == {"folder": 6}


def test_val_images_moved_into_synset_folders_keep_their_flat_xml(tmp_path):
    # ImageNet's valprep.sh moves val/X.JPEG into val/<synset>/ and leaves
    # Annotations/CLS-LOC/val/X.xml where it was: images and XML pair by file name.
    for i, synset in enumerate(SYNSETS):
        cls_loc(tmp_path, f"{synset}/{synset}_0", "train", jpeg_bytes())
        for n in range(2):
            name = f"ILSVRC2012_val_{i}{n}"
            cls_loc(tmp_path, f"{synset}/{name}", "val", jpeg_bytes())
            # The second image's XML names the other class: the XML wins, counted.
            named = SYNSETS[1 - i] if n else synset
            box = (2 + n, 3, 40, 30 + i)
            xml = voc_xml([(named, *box)], size=(64, 48))
            write(tmp_path / "Annotations/CLS-LOC/val" / f"{name}.xml", xml)
    out = tmp_path / "out"
    info = build(tmp_path, out, "--splits", "train,val")
    validation = info.splits["validation"]
    assert validation.num_examples == 4 and validation.num_rejected == 0
    assert validation.label_sources == {"xml": 4}
    assert validation.folder_disagreements == 2
    examples = {e[F.FILENAME][0].decode(): e for e in read_split(out, "validation")}
    for i, synset in enumerate(SYNSETS):
        for n in range(2):
            example = examples[f"Data/CLS-LOC/val/{synset}/ILSVRC2012_val_{i}{n}.JPEG"]
            assert example[F.LABEL] == [(1 - i) if n else i]
            assert example[F.BBOX_XMIN] == [pytest.approx((2 + n) / 64)]
            assert example[F.BBOX_YMAX] == [pytest.approx((30 + i) / 48)]
    # Each disagreement is named in rejected.jsonl, as reported (the image is written).
    assert sorted((d["path"], d["reason"], d["detail"]) for d in dead_letters(out)) == [
        (
            f"{tmp_path}/Data/CLS-LOC/val/{synset}/ILSVRC2012_val_{i}1.JPEG",
            "folder_disagreement",
            f"the XML's main object is {SYNSETS[1 - i]!r}, the class folder is {synset!r}; "
            f"labelled {SYNSETS[1 - i]!r} (the XML wins)",
        )
        for i, synset in enumerate(SYNSETS)
    ]


def test_a_flat_cls_loc_val_image_without_its_xml_is_rejected_not_background(tmp_path):
    # CLS-LOC has no negatives: an image whose XML is missing has no class to give it.
    for i, synset in enumerate(SYNSETS):
        cls_loc(tmp_path, f"{synset}/{synset}_0", "train", jpeg_bytes())
        xml = voc_xml([(synset, 1, 1, 30, 30)], size=(64, 48))
        cls_loc(tmp_path, f"ILSVRC2012_val_{i}", "val", jpeg_bytes(), xml)
    cls_loc(tmp_path, "ILSVRC2012_val_lost", "val", jpeg_bytes())
    out = tmp_path / "out"
    info = build(tmp_path, out, "--splits", "train,val", "--max_bad_fraction", "0.5")
    assert info.splits["validation"].label_sources == {"xml": 2}
    (lost,) = dead_letters(out)
    assert lost["path"] == f"{tmp_path}/Data/CLS-LOC/val/ILSVRC2012_val_lost.JPEG"
    assert (lost["split"], lost["stage"], lost["reason"]) == ("validation", "label", "no_class")
    assert "whose layout has no background images without one" in lost["detail"]


def refused_unless_a_labels_file_names(root, names, tmp_path, capsys):
    """(The build's error, and the DatasetInfo of the build with a labels file of `names`):
    the build and `plan` refuse the train split of `root` (exit 2, nothing written), and a
    labels file naming the classes builds it."""
    argv = ["--input_dir", str(root), "--splits", "train"]
    assert build_tool.main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert plan_tool.main(argv) == 2
    assert capsys.readouterr().err == error
    labels = write(tmp_path / "labels.txt", "".join(f"{name}\n" for name in names))
    out = tmp_path / "out"
    assert build_tool.main([*argv, "--output_dir", str(out), "--labels_file", str(labels)]) == 0
    return error, DatasetInfo.from_json((out / BUILD_INFO_FILE).read_text())


def test_a_train_class_folder_without_images_is_refused_unless_a_labels_file_names_it(
    tmp_path, capsys
):
    # One class's archive not extracted (its folder empty, or holding the .tar, or the .tar
    # beside the folders): the classes seen in train left it out, and every class after it got
    # an index one lower, exit 0.
    root = tmp_path / "tree"
    train = root / "Data/CLS-LOC/train"
    names = [f"n0000000{i}" for i in range(1, 7)]
    for synset in (names[0], names[2]):
        cls_loc(root, f"{synset}/{synset}_0", "train", jpeg_bytes())
    (train / names[1]).mkdir()
    write(train / names[3] / f"{names[3]}.tar", b"archive")
    write(train / f"{names[4]}.tar", b"archive")  # beside the folders
    write(train / names[5] / f"._{names[5]}_0.JPEG", b"macOS")  # AppleDouble only
    (train / ".cache").mkdir()  # hidden: not a class folder
    # Not classes: an extracted class's archive beside its folder, the whole train archive.
    write(train / f"{names[0]}.tar", b"archive")
    write(train / "ILSVRC2012_img_train.tar", b"archive")
    error, info = refused_unless_a_labels_file_names(root, names, tmp_path, capsys)
    assert error == (
        f"error: split 'train': 4 classes in {train} hold no image (n00000002, n00000004, "
        "n00000005.tar, n00000006): a build would leave them out of the vocabulary (the "
        "classes seen in train) and number the classes after them lower than other builds of "
        "the dataset do. Extract each class's archive into its folder (ImageNet's, in that "
        'folder: for f in n*.tar; do mkdir -p "${f%.tar}" && tar -xf "$f" -C "${f%.tar}" && '
        'rm "$f"; done; an archive inside its class folder: tar -xf it there), remove what is '
        "not wanted, or pass --labels_file (LOC_synset_mapping.txt, or a build's labels.txt) "
        "to keep every class's index\n"
    )
    assert info.class_list.names[:6] == tuple(names)
    assert info.splits["train"].class_counts[:6] == (1, 0, 1, 0, 0, 0)


def test_a_train_class_folder_that_is_a_link_the_listing_does_not_enter_is_refused(
    tmp_path, capsys
):
    # A class folder linked to nothing (its disk not mounted, a loop) or to another folder of
    # the tree (whose images the listing lists by their own path, once) held no image for
    # the build: the class was left out and every class after it numbered one lower, exit 0
    # (a loop crashed the build with a bare OSError).
    root = tmp_path / "tree"
    train = root / "Data/CLS-LOC/train"
    names = [f"n0000000{i}" for i in range(1, 8)]
    for synset in (names[0], names[2]):
        cls_loc(root, f"{synset}/{synset}_0", "train", jpeg_bytes())
    cls_loc(root, "n00000009/n00000009_0", "val", jpeg_bytes())
    (train / names[1]).symlink_to(names[0])  # another class of train
    (train / names[3]).symlink_to(root / "Data/CLS-LOC/val/n00000009")  # another split's
    (train / names[4]).symlink_to(tmp_path / "unmounted")
    (train / names[5]).symlink_to(names[5])  # a loop
    # Not refused: a link to a class folder outside the tree, links with a file's name.
    write(tmp_path / "elsewhere" / names[6] / f"{names[6]}_0.JPEG", jpeg_bytes())
    (train / names[6]).symlink_to(tmp_path / "elsewhere" / names[6])
    (train / "README").symlink_to(write(tmp_path / "readme", b"text"))
    (train / "notes.txt").symlink_to(tmp_path / "gone.txt")
    error, info = refused_unless_a_labels_file_names(root, names, tmp_path, capsys)
    assert error.startswith(
        f"error: split 'train': 4 classes in {train} hold no image (n00000002 (a link to "
        f"{train}/n00000001, whose images are listed there), n00000004 (a link to "
        f"{root}/Data/CLS-LOC/val/n00000009, whose images are listed there), n00000005 (a "
        "link to nothing), n00000006 (a link to nothing)): a build would leave them out of "
    )
    assert "tar -xf it there), point each linked class folder at its own images, remove" in error
    assert info.class_list.names[:7] == tuple(names)
    assert info.splits["train"].class_counts[:7] == (1, 0, 1, 0, 0, 0, 1)


def test_one_class_folder_under_two_names_a_name_not_utf8_or_no_image_format_is_refused(
    tmp_path, capsys
):
    # Two class links to one folder outside the tree: the listing entered it once, and the
    # other class was left out (exit 0, later classes one lower). A class folder whose name is
    # not UTF-8: its images were rejected within the 1% budget and the class left out.
    root = tmp_path / "tree"
    train = root / "Data/CLS-LOC/train"
    disk = tmp_path / "disk2"
    for synset in ("n03", "n04"):
        write(disk / synset / f"{synset}_0.JPEG", jpeg_bytes())
    (train).mkdir(parents=True)
    (train / "n01").symlink_to(disk / "n03")
    (train / "n03").symlink_to(disk / "n03")
    (train / "n04").symlink_to(disk / "n04")
    for i in range(120):
        cls_loc(root, f"n05/n05_{i}", "train", jpeg_bytes())
    for i in range(3):  # an iPhone's photos: not an empty folder nor an archive
        write(train / "n06" / f"IMG_{i}.HEIC", b"ftypheic")
    latin1 = os.fsencode(train) + b"/caf\xe9"
    os.mkdir(latin1)
    with open(latin1 + b"/1.JPEG", "wb") as stream:
        stream.write(jpeg_bytes())
    argv = ["--input_dir", str(root), "--splits", "train"]
    assert build_tool.main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"error: split 'train': 3 classes in {train} hold no image (caf\\udce9 (a name that "
        "is not UTF-8 text: its images are rejected), n03 (the same folder as n01), n06 (3 "
        ".heic files, not images the build reads: convert them to JPEG or PNG)): a build "
    )
    assert (
        "the dataset do. Put each class's images in its folder, point each linked class "
        "folder at its own images, rename each "
        "folder whose name is not UTF-8 (every name below the split: convmv -f latin1 -t utf8 "
        f"-r --notest {train}), remove what is not wanted, or pass --labels_file" in error
    )
    assert not (tmp_path / "out").exists()


def test_a_split_without_annotations_is_unlabelled(imagenet_copy):
    _, out, info = imagenet_copy
    test = info.splits["test"]
    assert not test.labelled
    assert test.label_sources == {"unlabelled": 4}
    assert test.class_counts == (0, 0, 0)
    examples = read_split(out, "test")
    assert len(examples) == 4
    for example in examples:
        assert example[F.LABEL] == [-1]
        assert example[F.ONE_HOT] == [0, 0, 0]
        assert example[F.LABEL_TEXT] == [b""]
    text = (out / BUILD_INFO_FILE).read_text()
    assert '"labelled": false' in text and '"labelled": true' in text


def first_record(out, split):
    (shard,) = DatasetInfo.from_json((out / BUILD_INFO_FILE).read_text()).splits[split].shards
    with open(out / shard.file, "rb") as stream:
        return next(read_records(stream))


def test_verify_accepts_the_unlabelled_split_and_refuses_labels_in_the_wrong_split(imagenet_copy):
    _, out, _ = imagenet_copy
    assert verify.verify(str(out)) == (3, [])
    unlabelled, labelled = first_record(out, "test"), first_record(out, "validation")
    assert verify.check_example(unlabelled, 2, labelled=False) is None
    assert verify.check_example(unlabelled, 2, labelled=True) == "label -1 outside [0, 2]"
    assert re.fullmatch(
        r"label [01] in an unlabelled split \(expected -1, one-hot all 0\)",
        verify.check_example(labelled, 2, labelled=False),
    )


def test_the_loader_refuses_labels_on_an_unlabelled_split(imagenet_copy):
    from loaders import load_dataset

    _, out, _ = imagenet_copy
    with pytest.raises(ValueError, match=r"split 'test' of .* is unlabelled .* label -1"):
        load_dataset(str(out), "test", batch_size=2)
    assert load_dataset(str(out), "validation", batch_size=2, image_size=(8, 8)).cardinality() == 4


def test_the_summary_says_where_labels_came_from(tmp_path, capsys):
    for n in range(3):
        ilsvrc_image(tmp_path, "train", f"a{n}", jpeg_bytes(), voc_xml([("cat", 1, 1, 9, 9)]))
    ilsvrc_image(tmp_path, "train", "neg", jpeg_bytes())
    ilsvrc_image(tmp_path, "test", "t0", jpeg_bytes())
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main([*argv, "--splits", "train,test"]) == 0
    printed = capsys.readouterr().out
    rows = {line.split()[0]: line.split(None, 6) for line in summary_rows(printed)}
    # The line that loads it never asks for a batch larger than the split.
    assert (
        f"ds = load_dataset('{tmp_path / 'out'}', 'train', batch_size=4, training=True)\n"
        in printed
    )
    # split, examples, shards, size (number, unit), rejected, labels
    assert rows["train"][:3] + rows["train"][5:] == [
        "train",
        "4",
        "1",
        "0",
        "3 from XML, 1 background",
    ]
    assert rows["test"][:3] + rows["test"][5:] == ["test", "1", "1", "0", "1 unlabelled (label -1)"]


def test_a_det_test_split_is_unlabelled_not_background(tmp_path):
    ilsvrc_image(tmp_path, "train", "a", jpeg_bytes(), voc_xml([("cat", 1, 1, 9, 9)]))
    ilsvrc_image(tmp_path, "test", "t", jpeg_bytes())
    info = build(tmp_path, tmp_path / "out", "--splits", "train,test")
    assert info.splits["test"].label_sources == {"unlabelled": 1}
    assert read_split(tmp_path / "out", "test")[0][F.LABEL] == [-1]


def test_a_labels_file_naming_the_background_class_is_refused_before_any_work(tmp_path, capsys):
    ilsvrc_image(tmp_path, "train", "a", jpeg_bytes(), voc_xml([("cat", 1, 1, 9, 9)]))
    labels = write(tmp_path / "labels.txt", "cat\nbackground\n")
    out = tmp_path / "out"
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(out), "--splits", "train"]
    assert build_tool.main([*argv, "--labels_file", str(labels)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: --labels_file {labels}: a class is named 'background'")
    assert not out.exists()


def test_labels_files_as_windows_editors_save_them_give_the_same_classes(tmp_path):
    # A UTF-8 byte-order mark is not part of the first class (it would make that class
    # unknown: its images rejected, under the 1% budget on ImageNet); UTF-16 with one is read.
    ilsvrc_image(tmp_path, "train", "a", jpeg_bytes(), voc_xml([("n01", 1, 1, 9, 9)]))
    ilsvrc_image(tmp_path, "train", "b", jpeg_bytes(), voc_xml([("n02", 1, 1, 9, 9)]))
    text = "n01 tench, Tinca tinca\r\nn02 goldfish\r\n"
    saved = {
        "utf8-bom": codecs.BOM_UTF8 + text.encode("utf-8"),
        "utf16": text.encode("utf-16"),  # with its byte-order mark
    }
    for name, data in saved.items():
        labels = tmp_path / f"{name}.txt"
        labels.write_bytes(data)
        info = build(tmp_path, tmp_path / name, "--splits", "train", "--labels_file", labels)
        assert info.classes == ("n01", "n02"), name
        assert info.display_names == {"n01": "tench, Tinca tinca", "n02": "goldfish"}
        assert info.splits["train"].num_examples == 2


def test_a_labels_file_that_is_not_text_or_not_a_file_is_refused_naming_it(tmp_path, capsys):
    ilsvrc_image(tmp_path, "train", "a", jpeg_bytes(), voc_xml([("n01", 1, 1, 9, 9)]))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("n01 café\n".encode("latin-1"))
    folder = tmp_path / "labels"
    folder.mkdir()
    out = tmp_path / "out"
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(out), "--splits", "train"]
    assert build_tool.main([*argv, "--labels_file", str(latin1)]) == 2
    assert capsys.readouterr().err == (
        f"error: --labels_file {latin1}: not UTF-8 text (byte 7 is b'\\xe9'); save it as UTF-8\n"
    )
    utf16 = tmp_path / "utf16-no-bom.txt"
    utf16.write_bytes("n01\n".encode("utf-16-le"))  # no byte-order mark: NULs between letters
    assert build_tool.main([*argv, "--labels_file", str(utf16)]) == 2
    assert capsys.readouterr().err == (
        f"error: --labels_file {utf16}: not UTF-8 text (byte 1 is b'\\x00' (UTF-16 without a "
        "byte-order mark?)); save it as UTF-8\n"
    )
    empty = write(tmp_path / "empty.txt", "\n")
    assert build_tool.main([*argv, "--labels_file", str(empty)]) == 2
    assert capsys.readouterr().err.startswith(f"error: --labels_file {empty}: ")
    assert build_tool.main([*argv, "--labels_file", str(folder)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: --labels_file {folder}: cannot read it: IsADirectoryError")
    assert "Traceback" not in error
    assert not out.exists()


def test_an_xml_class_named_background_fails_the_build_before_any_shard(tmp_path, capsys):
    ilsvrc_image(tmp_path, "train", "a", jpeg_bytes(), voc_xml([("background", 1, 1, 9, 9)]))
    ilsvrc_image(tmp_path, "train", "b", jpeg_bytes(), voc_xml([("cat", 1, 1, 9, 9)]))
    out = tmp_path / "out"
    assert (
        build_tool.main(
            ["--input_dir", str(tmp_path), "--output_dir", str(out), "--splits", "train"]
        )
        == 1
    )
    error = failure_line(capsys.readouterr().err)
    assert error.startswith("BUILD FAILED: the train split's annotations or folders: a class is")
    assert "--labels_file" in error
    assert not list(out.glob("*.tfrecord")) and not (out / BUILD_INFO_FILE).exists()


def test_a_labels_file_that_misses_classes_fails_before_any_shard_naming_them(tmp_path, capsys):
    for n in range(6):
        name = "cat" if n < 2 else "eel" if n < 5 else "owl"
        ilsvrc_image(tmp_path, "train", f"i{n}", jpeg_bytes(), voc_xml([(name, 1, 1, 9, 9)]))
    labels = write(tmp_path / "labels.txt", "cat\n")
    out = tmp_path / "out"
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(out), "--splits", "train"]
    assert build_tool.main([*argv, "--labels_file", str(labels)]) == 1
    assert failure_line(capsys.readouterr().err) == (
        "BUILD FAILED: 4 of 6 images rejected before any image was read (66.67%), more than "
        "--max_bad_fraction=0.01; reasons {'unknown_class': 4}; classes outside the vocabulary "
        f"(--labels_file {labels}), most frequent first: {{'eel': 3, 'owl': 1}}; "
        f"see {out}/rejected.jsonl"
    )
    assert not list(out.rglob("*.tfrecord*")) and not (out / BUILD_INFO_FILE).exists()
    assert sorted(d["reason"] for d in dead_letters(out)) == ["unknown_class"] * 4


def test_a_held_out_class_spelt_otherwise_than_train_s_is_said_to_be(tmp_path, capsys):
    # 'Dog' in val's XML, 'dog' in train's: "classes outside the vocabulary: {'Dog': 2}" and
    # no word of the likeness, which the check within a split gives.
    for n in range(4):
        name = "cat" if n % 2 else "dog"
        ilsvrc_image(tmp_path, "train", f"t{n}", jpeg_bytes(), voc_xml([(name, 1, 1, 9, 9)]))
    for n in range(2):
        ilsvrc_image(tmp_path, "val", f"v{n}", jpeg_bytes(), voc_xml([("Dog ", 1, 1, 9, 9)]))
    out = tmp_path / "out"
    assert build_tool.main(["--input_dir", str(tmp_path), "--output_dir", str(out)]) == 1
    assert failure_line(capsys.readouterr().err) == (
        "BUILD FAILED: 2 of 6 images rejected before any image was read (33.33%), more than "
        "--max_bad_fraction=0.01; reasons {'unknown_class': 2}; classes outside the vocabulary "
        "(the classes seen in the train split; --labels_file names them), most frequent first: "
        "{'Dog': 2} ('Dog' is "
        "another spelling of the vocabulary's 'dog', in case, spaces or Unicode form: use one "
        f"spelling in the XML <name>s or class folders); see {out}/rejected.jsonl"
    )
    assert [d["detail"] for d in dead_letters(out)] == [
        "class 'Dog' is not in the vocabulary of 2, spelt as the vocabulary's 'dog'"
    ] * 2


def _misplaced(root, image, xml) -> str:
    """The detail of an image whose XML lies in another folder of its split."""
    place = str(image.with_suffix(".xml")).replace("/Data/", "/Annotations/", 1)
    return (
        f"no XML at {place}, where its XML belongs, while {xml}, that path with folders added "
        "or left out or written otherwise (case, Unicode form, spaces, the image's extension), "
        f"pairs with no image: move that XML to {place}; built, the image would lack its objects"
    )


def test_an_xml_one_folder_away_from_its_image_is_not_read_as_a_negative(tmp_path, capsys):
    # DET: two val XML one folder deeper than their images made them background, exit 0.
    for n in range(6):
        xml = voc_xml([("cat" if n % 2 else "dog", 1, 1, 30, 30)], size=(64, 48))
        ilsvrc_image(tmp_path, "train", f"ILSVRC2014_train_0000/t{n}", jpeg_bytes(), xml)
        folder = "val/" if n < 2 else ""
        ilsvrc_image(tmp_path, "val", f"v{n}", jpeg_bytes())
        write(tmp_path / f"Annotations/DET/val/{folder}v{n}.xml", xml)
    assert plan_tool.main(["--input_dir", str(tmp_path), "--json"]) == 1
    plan = json.loads(capsys.readouterr().out)
    assert plan["splits"]["validation"]["rejected"] == {"annotation_misplaced": 2}
    out = tmp_path / "out"
    info = build(tmp_path, out, "--max_bad_fraction", "0.5")
    assert info.splits["validation"].label_sources == {"xml": 4}
    found = sorted((d["reason"], d["path"], d["detail"]) for d in dead_letters(out))
    images = [tmp_path / f"Data/DET/val/v{n}.JPEG" for n in range(2)]
    xmls = [tmp_path / f"Annotations/DET/val/val/v{n}.xml" for n in range(2)]
    assert found == [
        ("annotation_misplaced", str(image), _misplaced(tmp_path, image, xml))
        for image, xml in zip(images, xmls, strict=True)
    ] + [
        ("annotation_without_image", str(xml), f"no image with the key 'val/val/v{n}'")
        for n, xml in enumerate(xmls)
    ]
    names = sorted(e[F.FILENAME][0].decode() for e in read_split(out, "validation"))
    assert names == [f"Data/DET/val/v{n}.JPEG" for n in range(2, 6)]


def test_an_xml_a_folder_off_inside_the_split_is_not_read_as_a_negative(tmp_path):
    # n01/sub/x.xml for n01/x.JPEG: only folders at the front of the path counted, so the
    # image came out background, exit 0 (a plan-against-build trial).
    for n in range(1, 4):
        xml = voc_xml([("cat", 1, 1, 30, 30)], size=(64, 48))
        ilsvrc_image(tmp_path, "train", f"n01/t{n}", jpeg_bytes(), xml)
    ilsvrc_image(tmp_path, "train", "n01/t0", jpeg_bytes())
    xml = write(tmp_path / "Annotations/DET/train/n01/sub/t0.xml", voc_xml([("cat", 1, 1, 9, 9)]))
    out = tmp_path / "out"
    info = build(tmp_path, out, "--splits", "train", "--max_bad_fraction", "0.5")
    assert info.splits["train"].label_sources == {"xml": 3}
    image = tmp_path / "Data/DET/train/n01/t0.JPEG"
    found = [(d["reason"], d["path"], d["detail"]) for d in dead_letters(out)]
    assert ("annotation_misplaced", str(image), _misplaced(tmp_path, image, xml)) in found


def test_an_orphan_xml_that_several_images_could_be_of_rejects_none_of_them(tmp_path):
    # n01/IMG_1.xml (its own image deleted) was taken for both n01/day/IMG_1.JPEG's and
    # n01/night/IMG_1.JPEG's: each good image was rejected, told to move the same XML.
    for synset in SYNSETS:
        for n in range(3):
            cls_loc(tmp_path, f"{synset}/{synset}_{n}", "train", jpeg_bytes())
    for folder in ("day", "night"):
        cls_loc(tmp_path, f"{SYNSETS[0]}/{folder}/IMG_1", "train", jpeg_bytes())
    xml = voc_xml([(SYNSETS[0], 1, 1, 30, 30)], size=(64, 48))
    orphan = write(tmp_path / f"Annotations/CLS-LOC/train/{SYNSETS[0]}/IMG_1.xml", xml)
    out = tmp_path / "out"
    info = build(tmp_path, out, "--splits", "train", "--max_bad_fraction", "0.5")
    assert info.splits["train"].label_sources == {"folder": 3 * len(SYNSETS) + 2}
    assert [(d["reason"], d["path"]) for d in dead_letters(out)] == [
        ("annotation_without_image", str(orphan))
    ]


def test_a_split_whose_xml_all_lie_one_folder_deeper_is_refused_not_unlabelled(tmp_path):
    # CLS-LOC's val XML unpacked into Annotations/CLS-LOC/val/val/: the split had no XML where
    # the images' mirror is, and came out unlabelled (label -1), exit 0.
    for n, synset in enumerate(SYNSETS * 2):
        cls_loc(tmp_path, f"{synset}/{synset}_{n}", "train", jpeg_bytes())
        cls_loc(tmp_path, f"ILSVRC2012_val_{n}", "val", jpeg_bytes())
        xml = voc_xml([(synset, 1, 1, 30, 30)], size=(64, 48))
        write(tmp_path / f"Annotations/CLS-LOC/val/val/ILSVRC2012_val_{n}.xml", xml)
    with pytest.raises(Exception, match=re.escape("reasons {'annotation_misplaced': 4}")):
        build(tmp_path, tmp_path / "out")


def test_an_orphan_xml_of_another_folders_image_of_that_name_is_not_taken_for_its_own(tmp_path):
    # cat/1.xml pairs with no image: it is not dog/1.JPEG's, which keeps its folder's class
    # (matched by name alone, dog/1.JPEG was rejected, and moving the XML as told labelled it
    # cat, exit 0).
    for synset in SYNSETS:
        cls_loc(tmp_path, f"{synset}/{synset}_0", "train", jpeg_bytes())
    cls_loc(tmp_path, f"{SYNSETS[1]}/shared", "train", jpeg_bytes())
    xml = voc_xml([(SYNSETS[0], 1, 1, 30, 30)], size=(64, 48))
    write(tmp_path / f"Annotations/CLS-LOC/train/{SYNSETS[0]}/shared.xml", xml)
    out = tmp_path / "out"
    info = build(tmp_path, out, "--splits", "train")
    assert info.splits["train"].label_sources == {"folder": 3}
    assert [d["reason"] for d in dead_letters(out)] == ["annotation_without_image"]


@pytest.mark.parametrize(
    "image_name, xml_name",
    [
        ("Img0", "img0"),  # another case
        ("Zo\u0065\u0308", "Zo\u00eb"),  # decomposed and composed (a tree copied from a Mac)
        ("trail", "trail "),  # a space at the end of the name
        ("dbl", "dbl.JPEG"),  # the image's whole file name before .xml
    ],
)
def test_an_xml_named_otherwise_than_its_image_is_not_read_as_a_negative(
    tmp_path, image_name, xml_name
):
    # Img1.JPEG beside img1.xml, or names that differ in Unicode form, a space or the image's
    # extension: keys are exact, so the image came out background and its XML an orphan, exit 0.
    for n in range(1, 4):
        xml = voc_xml([("cat", 1, 1, 30, 30)], size=(64, 48))
        ilsvrc_image(tmp_path, "train", f"Img{n}", jpeg_bytes(), xml)
    ilsvrc_image(tmp_path, "train", image_name, jpeg_bytes())
    xml = write(tmp_path / f"Annotations/DET/train/{xml_name}.xml", voc_xml([("cat", 1, 1, 9, 9)]))
    out = tmp_path / "out"
    info = build(tmp_path, out, "--splits", "train", "--max_bad_fraction", "0.5")
    assert info.splits["train"].label_sources == {"xml": 3}
    image = tmp_path / f"Data/DET/train/{image_name}.JPEG"
    found = [(d["reason"], d["path"], d["detail"]) for d in dead_letters(out)]
    assert ("annotation_misplaced", str(image), _misplaced(tmp_path, image, xml)) in found


def test_a_held_out_image_whose_xml_is_misplaced_is_rejected_as_a_training_one_is(tmp_path, capsys):
    # --validation_split took one of two images whose XML lay named otherwise out of train:
    # orphans were looked for in the image's new split (validation), where none lay, so it
    # came out background, exit 0 (in CLS-LOC its folder's class; no_class in a VOC export).
    for n in range(4):
        xml = voc_xml([("cat", 1, 1, 30, 30)], size=(64, 48))
        ilsvrc_image(tmp_path, "train", f"ILSVRC2014_train_0000/t{n}", jpeg_bytes(), xml)
    xmls = {"Img8": "img8", "Img9": "Img9.JPEG"}  # (the two images alone are of no class)
    for image, name in xmls.items():
        ilsvrc_image(tmp_path, "train", f"ILSVRC2014_train_0000/{image}", jpeg_bytes())
        xml = voc_xml([("cat", 1, 1, 9, 9)])
        write(tmp_path / f"Annotations/DET/train/ILSVRC2014_train_0000/{name}.xml", xml)
    argv = ["--splits", "train", "--validation_split", "0.5", "--max_bad_fraction", "0.5"]
    assert plan_tool.main(["--input_dir", str(tmp_path), "--json", *argv]) == 0
    planned = json.loads(capsys.readouterr().out)["splits"]
    assert [planned[s]["rejected"] for s in ("train", "validation")] == [
        {"annotation_misplaced": 1}
    ] * 2
    out = tmp_path / "out"
    info = build(tmp_path, out, *argv)
    # The images whose XML lie where they belong are held out as before, labelled by it.
    assert [info.splits[s].label_sources for s in ("train", "validation")] == [{"xml": 2}] * 2
    found = {d["path"]: (d["split"], d["reason"], d["detail"]) for d in dead_letters(out)}
    splits = set()
    for image, name in xmls.items():
        path = tmp_path / f"Data/DET/train/ILSVRC2014_train_0000/{image}.JPEG"
        xml = tmp_path / f"Annotations/DET/train/ILSVRC2014_train_0000/{name}.xml"
        split, reason, detail = found[str(path)]
        assert (reason, detail) == ("annotation_misplaced", _misplaced(tmp_path, path, xml))
        splits.add(split)
    assert splits == {"train", "validation"}


def test_classes_that_differ_only_in_case_or_unicode_form_are_refused(tmp_path, capsys):
    # LabelImg sessions that typed 'Dog' and 'dog', 'café' composed and decomposed, or 'cat'
    # with a zero-width space pasted in: each spelling became a class of its own, exit 0.
    root = tmp_path / "tree"
    names = ["Dog", "dog", "caf\u00e9", "cafe\u0301", "cat", "cat\u200b"]
    for i, name in enumerate(names):
        xml = voc_xml([(name, 1, 1, 30, 30)], size=(64, 48))
        ilsvrc_image(root, "train", f"img{i}", jpeg_bytes(), xml)
    argv = ["--input_dir", str(root), "--splits", "train", "--output_dir", str(tmp_path / "o")]
    assert build_tool.main(argv) == 1
    assert (
        "the train split names classes that differ only in case, spaces, invisible characters "
        "or Unicode form: 'Dog' and 'dog'; 'cafe\\u0301' and 'caf\\xe9'; 'cat' and 'cat\\u200b'; "
        "a build would make each a class of its own. Use "
        "one spelling in the XML <name>s or class folders, or pass --labels_file listing each "
        "to keep them apart" in capsys.readouterr().err
    )
    labels = write(tmp_path / "labels.txt", "".join(f"{name}\n" for name in names))
    out = tmp_path / "out"
    assert build_tool.main([*argv[:-1], str(out), "--labels_file", str(labels)]) == 0
    info = DatasetInfo.from_json((out / BUILD_INFO_FILE).read_text())
    assert info.class_list.names[:6] == tuple(names)
