"""Pascal VOC XML where it lies: Roboflow's export (XML beside each image, in train/, valid/,
test/) and Kaggle's (images/ with annotations/ beside it), built as they are."""

from __future__ import annotations

import pytest
from helpers import build, dead_letters, jpeg_bytes, png_bytes, read_split, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tree import locate, planner
from beam_pipeline.tree.folders import TREE_ACCESS, has_files, subdirectories
from beam_pipeline.tree.layouts import VOC, VOC_XML, LayoutError
from schemas import features as F


def roboflow(root):
    """train/, valid/, test/ each with 2 images and their XML beside them (Roboflow's names)."""
    for split in ("train", "valid", "test"):
        for number, objects in enumerate(
            [[("cat", 1, 1, 20, 20), ("dog", 1, 1, 40, 30)], [("cat", 2, 3, 50, 40)]]
        ):
            stem = f"img{number}_jpg.rf.{split}"
            write(root / split / f"{stem}.jpg", jpeg_bytes())
            write(root / split / f"{stem}.xml", voc_xml(objects, size=(64, 48)))
    return root


def test_roboflow_export_builds_with_its_splits_and_boxes(tmp_path):
    root = roboflow(tmp_path / "export")
    info = build(root, tmp_path / "out")
    assert info.classes == ("cat", "dog")
    assert sorted(info.splits) == ["test", "train", "validation"]
    for split, folder in (("train", "train"), ("validation", "valid"), ("test", "test")):
        records = sorted(read_split(tmp_path / "out", split), key=lambda e: e[F.FILENAME])
        assert [(e[F.FILENAME][0].decode(), e[F.LABEL][0]) for e in records] == [
            (f"{folder}/img0_jpg.rf.{folder}.jpg", 1),  # the dog's box is the larger
            (f"{folder}/img1_jpg.rf.{folder}.jpg", 0),
        ]
        assert records[0][F.OBJECT_TEXT] == [b"cat", b"dog"]
        assert records[0][F.BBOX_XMAX] == pytest.approx([20 / 64, 40 / 64])
        assert records[1][F.BBOX_YMIN] == pytest.approx([3 / 48])
    assert not dead_letters(tmp_path / "out")


def test_kaggle_images_and_annotations_build_in_a_download_folder(tmp_path):
    # Kaggle's face-mask set: archive/images/*.png, archive/annotations/*.xml.
    root = tmp_path / "download" / "archive"
    for number in range(6):
        name = "with_mask" if number % 2 else "without_mask"
        write(root / "images" / f"maksssksksss{number}.png", png_bytes(40, 30))
        write(
            root / "annotations" / f"maksssksksss{number}.xml",
            voc_xml([(name, 1, 1, 20, 20)], size=(40, 30)),
        )
    info = build(tmp_path / "download", tmp_path / "out", "--validation_split", "0.34")
    assert info.classes == ("with_mask", "without_mask")
    assert {name: split.class_counts for name, split in info.splits.items()} == {
        "train": (2, 2, 0),
        "validation": (1, 1, 0),
    }
    record = read_split(tmp_path / "out", "train")[0]
    assert record[F.FILENAME][0].decode().startswith("images/maksssksksss")


def test_split_folders_inside_images_and_annotations_are_the_splits(tmp_path):
    # images/{train,val}/X.jpg with annotations/{train,val}/X.xml: once, both were built
    # into one train split without a word.
    root = tmp_path / "export"
    for split, classes in (("train", ("head", "helmet", "head")), ("val", ("helmet", "head"))):
        for number, name in enumerate(classes):
            write(root / "images" / split / f"{split}{number}.jpg", jpeg_bytes())
            write(
                root / "annotations" / split / f"{split}{number}.xml",
                voc_xml([(name, 1, 1, 20, 20)], size=(64, 48)),
            )
    write(root / "images" / "stray.jpg", jpeg_bytes())
    info = build(root, tmp_path / "out")
    assert info.classes == ("head", "helmet")
    assert {name: split.class_counts for name, split in info.splits.items()} == {
        "train": (2, 1, 0),
        "validation": (1, 1, 0),
    }
    names = sorted(e[F.FILENAME][0].decode() for e in read_split(tmp_path / "out", "validation"))
    assert names == ["images/val/val0.jpg", "images/val/val1.jpg"]
    assert [(d["path"], d["reason"], d["is_image"]) for d in dead_letters(tmp_path / "out")] == [
        (str(root / "images" / "stray.jpg"), "in_no_split", False)
    ]
    plan = planner.plan_discovery(str(root), VOC_XML, ("train",), TREE_ACCESS)
    assert (plan.unbuilt, plan.outside) == (("val",), (f"{root}/images/stray.jpg",))
    with pytest.raises(LayoutError, match=r"split 'test' has no folder in .*images: the splits"):
        build(root, tmp_path / "out2", "--splits", "train,test")
    # Split folders of another case and name: --splits takes them as the default build does.
    for folder in ("images", "annotations"):
        (root / folder / "val").rename(root / folder / "VALID")
    plan = planner.plan_discovery(str(root), VOC_XML, ("train", "validation"), TREE_ACCESS)
    assert [t.key_prefix for t in plan.tasks if t.kind == "images"] == ["train", "VALID"]
    assert plan.unbuilt == ()


def test_an_image_without_its_xml_is_rejected_not_background(tmp_path):
    root = roboflow(tmp_path / "export")
    write(root / "train" / "lost.jpg", jpeg_bytes())
    info = build(root, tmp_path / "out", "--max_bad_fraction", "0.5")
    assert info.splits["train"].num_examples == 2
    (rejected,) = dead_letters(tmp_path / "out")
    assert (rejected["path"], rejected["reason"]) == (str(root / "train/lost.jpg"), "no_class")
    assert (
        "(an export of VOC XML gives an image of no object an XML without <object>; ILSVRC "
        "CLS-LOC has none)" in rejected["detail"]
    )  # (it led with ILSVRC CLS-LOC, as if the tree were one)


def test_an_image_beside_its_xml_named_in_another_case_is_told_to_rename_it(tmp_path):
    # Img1.jpg beside img1.xml: rejected as no_class ("restore its XML") while its XML lay
    # beside it; DET's trees named the XML to move.
    root = roboflow(tmp_path / "export")
    write(root / "train" / "Img9.jpg", jpeg_bytes())
    write(root / "train" / "img9.xml", voc_xml([("cat", 1, 1, 20, 20)], size=(64, 48)))
    build(root, tmp_path / "out", "--max_bad_fraction", "0.5")
    rejected = {line["path"]: line for line in dead_letters(tmp_path / "out")}
    image = rejected[str(root / "train/Img9.jpg")]
    assert image["reason"] == "annotation_misplaced"
    assert image["detail"].startswith(
        f"no XML at {root}/train/Img9.xml, where its XML belongs, while {root}/train/img9.xml"
    )
    assert rejected[str(root / "train/img9.xml")]["reason"] == "annotation_without_image"


def test_a_held_out_image_beside_its_xml_named_otherwise_is_told_to_rename_it(tmp_path):
    # With --validation_split, the one of Img8.jpg and Img9.jpg (img8.xml, 'Img9 .xml' beside
    # them) held out was rejected as no_class ("restore its XML"); the other named its XML.
    root = tmp_path / "export"
    for number in range(4):
        write(root / f"img{number}.jpg", jpeg_bytes())
        write(root / f"img{number}.xml", voc_xml([("cat", 1, 1, 20, 20)], size=(64, 48)))
    for image, xml in (("Img8", "img8"), ("Img9", "Img9 ")):
        write(root / f"{image}.jpg", jpeg_bytes())
        write(root / f"{xml}.xml", voc_xml([("dog", 1, 1, 20, 20)], size=(64, 48)))
    out = tmp_path / "out"
    build(root, out, "--validation_split", "0.5", "--max_bad_fraction", "0.5")
    images = {line["path"]: line for line in dead_letters(out) if line["is_image"]}
    assert sorted((line["split"], line["reason"]) for line in images.values()) == [
        ("train", "annotation_misplaced"),
        ("validation", "annotation_misplaced"),
    ]
    assert images[str(root / "Img9.jpg")]["detail"].startswith(
        f"no XML at {root}/Img9.xml, where its XML belongs, while {root}/Img9 .xml"
    )


def test_a_voc_layout_named_on_an_export_is_refused_naming_it(tmp_path):
    root = roboflow(tmp_path / "export")
    with pytest.raises(LayoutError, match=r"holds the layout 'voc_xml', not 'voc': pass --layout"):
        locate.locate_tree(str(root), VOC, has_files, subdirectories)


def test_an_xml_without_objects_is_background(tmp_path):
    root = roboflow(tmp_path / "export")
    write(root / "train" / "empty.jpg", jpeg_bytes())
    write(root / "train" / "empty.xml", voc_xml([], size=(64, 48)))
    info = build(root, tmp_path / "out")
    assert info.splits["train"].class_counts == (1, 1, 1)
    labels = {
        e[F.FILENAME][0].decode(): e[F.LABEL][0] for e in read_split(tmp_path / "out", "train")
    }
    assert labels["train/empty.jpg"] == 2  # the background index


def test_layout_voc_xml_is_taken_as_named_and_stray_files_are_reported(tmp_path):
    root = roboflow(tmp_path / "export")
    write(root / "train" / "README.roboflow.txt", "exported")
    info = build(root, tmp_path / "out", "--layout", "voc_xml", "--splits", "train")
    assert list(info.splits) == ["train"] and info.splits["train"].num_examples == 2
    (stray,) = dead_letters(tmp_path / "out")
    assert (stray["reason"], stray["detail"]) == (
        "not_an_image_file",
        "not an image or its XML annotation by its name (extension '.txt')",
    )


def test_plan_counts_an_exports_xml_without_objects_as_background(tmp_path, capsys):
    # A trial's: plan said "classes: 2" and left background out of the classes present and
    # the most frequent, where the build (and plan --json) had 2 background images.
    from beam_pipeline.tools import plan as plan_tool

    root = roboflow(tmp_path / "export")
    for number in range(2):
        write(root / "train" / f"empty{number}.jpg", jpeg_bytes())
        write(root / "train" / f"empty{number}.xml", voc_xml([], size=(64, 48)))
    assert plan_tool.main(["--input_dir", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "classes: 2 (from the classes seen in the train split), plus background"
    train = lines[lines.index("train (objects):") :]
    assert train[3:6] == [
        "  classes present: 3 of 3 (background included)",
        "  most frequent: background 2, cat 1, dog 1",
        "  least frequent: cat 1, dog 1, background 2",
    ]
    info = build(root, tmp_path / "out")
    assert info.splits["train"].class_counts == (1, 1, 2)


def test_a_folder_named_as_a_voc_year_without_its_lists_is_said_to_lack_them(tmp_path):
    # A copy of VOC2007 that lost ImageSets/ built its test images into train without a word.
    voc = tmp_path / "VOC2007"
    for name in ("a", "b"):
        write(voc / "JPEGImages" / f"{name}.jpg", jpeg_bytes())
        write(voc / "Annotations" / f"{name}.xml", voc_xml([("cat", 1, 1, 9, 9)], (32, 32)))
    plan = planner.plan_discovery(str(voc), VOC_XML, ("train",), TREE_ACCESS)
    assert plan.notes == (
        f"Note: {voc} is named as a Pascal VOC year but has no ImageSets/Main/ split lists: "
        "built as an export of VOC XML, its images in the splits of its folders, or one train "
        "split without them; VOC's own splits need its ImageSets/Main/<split>.txt",
    )
    renamed = voc.rename(tmp_path / "birds")
    assert planner.plan_discovery(str(renamed), VOC_XML, ("train",), TREE_ACCESS).notes == ()
