import os
import re
import subprocess

import pytest
from helpers import build, dead_letters, ilsvrc_image, jpeg_bytes, read_split, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tree.layouts import LayoutError
from beam_pipeline.tree.listing import (
    Entered,
    Listed,
    Subdirectory,
    Unlisted,
    file_version,
    list_directory,
    list_tree,
    walk_subtree,
)
from schemas import features as F


def listed(path) -> Listed:
    return Listed(str(path), path.stat().st_size, file_version(path.stat()))


def test_lists_files_in_path_order_with_sizes_and_times(tmp_path):
    write(tmp_path / "b" / "2.JPEG", b"12")
    write(tmp_path / "a.JPEG", b"1")
    assert list(list_tree(str(tmp_path))) == [
        listed(tmp_path / "a.JPEG"),
        listed(tmp_path / "b" / "2.JPEG"),
    ]
    assert list(list_tree(str(tmp_path / "missing"))) == []


def test_follows_directory_links_and_stops_loops(tmp_path):
    write(tmp_path / "elsewhere" / "n01" / "x.JPEG", b"x")
    tree = tmp_path / "tree"
    tree.mkdir()
    os.symlink(tmp_path / "elsewhere" / "n01", tree / "n01")
    os.symlink(tree, tree / "loop")
    items = list(list_tree(str(tree)))
    assert items[0] == Unlisted(str(tree / "loop"), "directory_visited_twice", items[0].detail)
    assert items[1] == listed(tree / "n01" / "x.JPEG")
    assert len(items) == 2


def test_reports_broken_links_and_special_files(tmp_path):
    os.symlink(tmp_path / "gone.JPEG", tmp_path / "a.JPEG")
    os.mkfifo(tmp_path / "b.JPEG")
    os.symlink(tmp_path / "c.JPEG", tmp_path / "c.JPEG")  # a loop: it said "does not exist"
    os.symlink("/dev/zero", tmp_path / "d.jpg")  # it said "links to '/dev/zero', which does not
    items = list(list_tree(str(tmp_path)))  # exist" (an adversarial trial)
    assert [
        (type(i).__name__, os.path.basename(i.path), getattr(i, "reason", None), i.detail)
        for i in items
    ] == [
        (
            "Unlisted",
            "a.JPEG",
            "broken_symlink",
            f"links to '{tmp_path}/gone.JPEG', which does not exist",
        ),
        ("Unlisted", "b.JPEG", "not_a_regular_file", "a device, socket or pipe"),
        (
            "Unlisted",
            "c.JPEG",
            "broken_symlink",
            f"links to '{tmp_path}/c.JPEG', and the links from there lead back to it (a loop)",
        ),
        (
            "Unlisted",
            "d.jpg",
            "not_a_regular_file",
            "links to '/dev/zero', a device, socket or pipe",
        ),
    ]


def test_class_folders_of_tools_and_file_servers_are_skipped_and_reported(tmp_path):
    # Jupyter's checkpoint folder became class 0 and shifted every ImageNet label by one, and
    # a copy inside a class folder was written twice; Synology's thumbnails likewise.
    train = tmp_path / "in/Data/CLS-LOC/train"
    for synset in ("n01440764", "n01443537"):
        write(train / synset / f"{synset}_1.JPEG", jpeg_bytes())
    write(train / ".ipynb_checkpoints/n01440764_1-checkpoint.JPEG", jpeg_bytes())
    write(train / "n01443537/.ipynb_checkpoints/n01443537_1-checkpoint.JPEG", jpeg_bytes())
    write(train / "n01443537/@eaDir/n01443537_1.JPEG/SYNOPHOTO_THUMB_S.jpg", jpeg_bytes())
    write(train / "__MACOSX/n01443537/._n01443537_1.JPEG", jpeg_bytes())  # a Mac's zip
    info = build(tmp_path / "in", tmp_path / "out", "--splits", "train")
    assert info.classes == ("n01440764", "n01443537")
    assert info.splits["train"].num_examples == 2
    names = sorted(e[F.FILENAME][0].decode() for e in read_split(tmp_path / "out", "train"))
    assert names == [f"Data/CLS-LOC/train/{s}/{s}_1.JPEG" for s in info.classes]
    assert sorted((r["reason"], r["path"]) for r in dead_letters(tmp_path / "out")) == [
        ("skipped_folder", str(train / ".ipynb_checkpoints")),
        ("skipped_folder", str(train / "__MACOSX")),
        ("skipped_folder", str(train / "n01443537/.ipynb_checkpoints")),
        ("skipped_folder", str(train / "n01443537/@eaDir")),
    ]


@pytest.mark.skipif(os.getuid() == 0, reason="root reads unreadable directories")
def test_reports_unreadable_directories(tmp_path):
    locked = tmp_path / "locked"
    write(locked / "x.JPEG", b"x")
    locked.chmod(0)
    try:
        assert [i.reason for i in list_tree(str(tmp_path))] == ["unreadable_directory"]
    finally:
        locked.chmod(0o755)


def test_build_accounts_for_links_loops_and_odd_names(tmp_path):
    root = tmp_path / "tree"
    elsewhere = tmp_path / "elsewhere"
    ilsvrc_image(root, "train", "real/a", jpeg_bytes(), voc_xml([("cat", 1, 1, 20, 20)]))
    write(elsewhere / "b.JPEG", jpeg_bytes())
    write(elsewhere / "c.JPEG", jpeg_bytes())
    os.symlink(elsewhere, root / "Data/DET/train/linked")
    (root / "Annotations/DET/train/linked").mkdir()  # its images are negatives
    os.symlink(root / "Data/DET/train", root / "Data/DET/train/real/loop")
    os.symlink(tmp_path / "nowhere.JPEG", root / "Data/DET/train/real/broken.JPEG")
    write(
        root / b"Data/DET/train/real/caf\xe9.JPEG".decode("utf-8", "surrogateescape"), jpeg_bytes()
    )
    write(root / "Data/DET/train/real/notes.txt", "stray")
    (root / "Data/DET/train/empty_dir").mkdir()
    info = build(root, tmp_path / "out", "--splits", "train", "--max_bad_fraction", "0.5")
    train = info.splits["train"]
    assert (train.num_discovered, train.num_examples, train.num_rejected) == (5, 3, 2)
    ids = sorted(e[F.SOURCE_ID][0].decode() for e in read_split(tmp_path / "out", "train"))
    assert ids == ["train/linked/b", "train/linked/c", "train/real/a"]
    reasons = sorted((d["reason"], d["is_image"]) for d in dead_letters(tmp_path / "out"))
    assert reasons == [
        ("broken_symlink", True),
        ("directory_visited_twice", False),
        ("not_an_image_file", False),
        ("undecodable_path", True),
    ]
    odd = next(d for d in dead_letters(tmp_path / "out") if d["reason"] == "undecodable_path")
    assert odd["path"].endswith("real/caf\\udce9.JPEG")


def test_a_link_to_a_directory_of_the_tree_is_refused_wherever_it_sorts(tmp_path):
    # "A_alias" sorts before the folder it links to: the folder is listed by its own path.
    write(tmp_path / "n02" / "x.JPEG", b"x")
    os.symlink(tmp_path / "n02", tmp_path / "A_alias")
    items = list(list_tree(str(tmp_path)))
    assert items[0] == Unlisted(
        str(tmp_path / "A_alias"), "directory_visited_twice", items[0].detail
    )
    assert "listed by its own path" in items[0].detail
    assert items[1:] == [listed(tmp_path / "n02" / "x.JPEG")]


def test_a_link_to_a_folder_above_the_tree_is_refused_not_walked(tmp_path):
    # A link to `/` in a class folder walked the whole disk with no word (a trial).
    write(tmp_path / "elsewhere" / "stray.jpg", jpeg_bytes())
    root = tmp_path / "photos"
    for name in ("cat", "dog"):
        write(root / name / "a.jpg", jpeg_bytes())
    os.symlink(tmp_path, root / "cat" / "up")
    items = list(list_tree(str(root)))
    refused = Unlisted(
        str(root / "cat" / "up"),
        "directory_visited_twice",
        f"resolves to {tmp_path}, a folder that holds the tree itself (a link to a folder "
        "above it): not listed",
    )
    assert items == [listed(root / "cat" / "a.jpg"), refused, listed(root / "dog" / "a.jpg")]
    # A worker's walk of the link as a part of the tree enters it and goes no further.
    link = str(root / "cat" / "up")
    assert list(walk_subtree(link, str(root))) == [Entered(link, str(tmp_path))]
    info = build(root, tmp_path / "out", "--splits", "train")  # the workers' walk of parts
    assert (info.splits["train"].num_examples, info.classes) == (2, ("cat", "dog"))
    assert [(d["reason"], d["path"], d["detail"]) for d in dead_letters(tmp_path / "out")] == [
        ("directory_visited_twice", str(root / "cat" / "up"), refused.detail)
    ]


def test_a_link_above_the_tree_among_a_splits_folders_is_not_made_a_part_to_walk(tmp_path):
    # A trial's: `Data/DET/train/root -> /` made each folder of the disk a part of the tree,
    # walked (a build still listing after 300 s) while plan said it would not be listed.
    root = tmp_path / "tree"
    for i in range(2):
        box = ("cat", 1, 1, 20, 20)
        ilsvrc_image(root, "train", f"ILSVRC2014_0000/img{i}", jpeg_bytes(), voc_xml([box]))
    write(tmp_path / "elsewhere" / "ILSVRC2014_0001" / "stray.JPEG", jpeg_bytes())
    train = root / "Data/DET/train"
    os.symlink(tmp_path, train / "up")
    items = list(list_directory(str(train), str(train)))
    assert items == [
        Entered(str(train), str(train)),
        Subdirectory(str(train / "ILSVRC2014_0000")),
        Entered(str(train / "up"), str(tmp_path)),  # for `revisited` to refuse, not a part
    ]
    info = build(root, tmp_path / "out", "--splits", "train")
    assert info.splits["train"].num_examples == 2
    assert [(d["reason"], d["path"]) for d in dead_letters(tmp_path / "out")] == [
        ("directory_visited_twice", str(train / "up"))
    ]


def test_an_alias_of_an_annotated_folder_keeps_its_images_paired_with_their_xml(tmp_path):
    # The images are found by the path their XML mirrors: none turns into a background negative.
    root = tmp_path / "tree"
    for i in range(4):
        box = ("cat" if i % 2 else "dog", 1, 1, 20, 20)
        ilsvrc_image(root, "train", f"ILSVRC2014_0000/img{i}", jpeg_bytes(), voc_xml([box]))
    os.symlink(root / "Data/DET/train/ILSVRC2014_0000", root / "Data/DET/train/A_alias")
    info = build(root, tmp_path / "out", "--splits", "train")
    train = info.splits["train"]
    assert (train.num_examples, dict(train.label_sources)) == (4, {"xml": 4})
    names = sorted(e[F.LABEL_TEXT][0].decode() for e in read_split(tmp_path / "out", "train"))
    assert names == ["cat", "cat", "dog", "dog"]
    assert [(d["reason"], d["path"].split("/")[-1]) for d in dead_letters(tmp_path / "out")] == [
        ("directory_visited_twice", "A_alias")
    ]


def test_split_folders_that_are_one_folder_are_refused(tmp_path):
    # val linked to train (or both linked to one folder) made validation a copy of train.
    root = tmp_path / "tree"
    for i in range(2):
        ilsvrc_image(root, "train", f"n01/a{i}", jpeg_bytes(), task="CLS-LOC")
    os.symlink(root / "Data/CLS-LOC/train", root / "Data/CLS-LOC/val")
    train, val = root / "Data/CLS-LOC/train", root / "Data/CLS-LOC/val"
    expected = (
        f"{train} and {val} are one folder (both {train}): a build would write its images into "
        "the train split and the validation split alike. Give each its own images (ls -l "
        f"{root / 'Data/CLS-LOC'} shows the links)"
    )
    with pytest.raises(LayoutError, match=re.escape(expected)):
        build(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    photos = tmp_path / "photos"
    (root / "Data/CLS-LOC/val").unlink()
    (root / "Data/CLS-LOC/train").rename(photos)
    for split in ("train", "val"):  # the README's link recipe, given one folder twice
        os.symlink(photos, root / "Data/CLS-LOC" / split)
    with pytest.raises(LayoutError, match=re.escape(f"are one folder (both {photos})")):
        build(root, tmp_path / "out")


def test_a_link_into_another_splits_folder_is_reported_and_not_entered(tmp_path):
    # train/n09 linked to val/n02 wrote val's images into train too, as a class of their own.
    root = tmp_path / "tree"
    for i in range(3):
        ilsvrc_image(root, "train", f"n01/a{i}", jpeg_bytes(), task="CLS-LOC")
        ilsvrc_image(root, "train", f"n02/b{i}", jpeg_bytes(), task="CLS-LOC")
        ilsvrc_image(root, "val", f"n02/v{i}", jpeg_bytes(), task="CLS-LOC")
    link = root / "Data/CLS-LOC/train/n09"
    os.symlink(root / "Data/CLS-LOC/val/n02", link)
    # Class n09 holds no image of its own: refused unless a labels file names the classes
    # (test_label_rules), so the build names them.
    labels = write(tmp_path / "labels.txt", "n01\nn02\nn09\n")
    info = build(root, tmp_path / "out", "--labels_file", str(labels))
    assert info.classes == ("n01", "n02", "n09")
    assert (info.splits["train"].num_examples, info.splits["validation"].num_examples) == (6, 3)
    ids = sorted(e[F.SOURCE_ID][0].decode() for e in read_split(tmp_path / "out", "train"))
    assert ids == [f"train/n01/a{i}" for i in range(3)] + [f"train/n02/b{i}" for i in range(3)]
    (line,) = dead_letters(tmp_path / "out")
    assert (line["path"], line["reason"], line["split"]) == (
        str(link),
        "directory_visited_twice",
        "train",
    )
    assert f"in {root / 'Data/CLS-LOC/val'}, another split's folder" in line["detail"]
    listed = list(list_tree(str(root / "Data/CLS-LOC/train"), [str(root / "Data/CLS-LOC/val")]))
    assert [item.path for item in listed if isinstance(item, Unlisted)] == [str(link)]


@pytest.mark.parametrize("splits", [(), ("--splits", "train")])
def test_a_det_folder_linked_to_another_splits_is_reported_not_called_unannotated(tmp_path, splits):
    # train/sib -> ../val/a was refused as "has no annotation folder", a build's wrong reason:
    # the listing reports the link as another split's folder and never enters it. Its XML's
    # mirror link was entered: val's XML were reported as train's, one orphan each.
    root = tmp_path / "tree"
    for split in ("train", "val"):
        for i in range(2):
            stem = f"a/{split}{i}"
            ilsvrc_image(root, split, stem, jpeg_bytes(), voc_xml([("n01", 1, 1, 20, 20)]))
    link, xml_link = root / "Data/DET/train/sib", root / "Annotations/DET/train/sib"
    os.symlink(root / "Data/DET/val/a", link)
    os.symlink(root / "Annotations/DET/val/a", xml_link)
    os.symlink(root / "Data/DET/val/a", root / "Data/DET/train/a/inner")  # a level down
    info = build(root, tmp_path / "out", *splits)
    assert info.splits["train"].num_examples == 2
    assert [s.num_examples for n, s in info.splits.items() if n != "train"] == [2][
        : 1 - len(splits)
    ]
    assert sorted((d["path"], d["reason"]) for d in dead_letters(tmp_path / "out")) == [
        (str(xml_link), "directory_visited_twice"),
        (str(root / "Data/DET/train/a/inner"), "directory_visited_twice"),
        (str(link), "directory_visited_twice"),
    ]


def test_jfif_files_are_images(tmp_path):
    # Browsers save JPEGs as .jfif: they were reported as not_an_image_file and left out.
    root = tmp_path / "tree"
    ilsvrc_image(root, "train", "n01/a", jpeg_bytes(), task="CLS-LOC")
    write(root / "Data/CLS-LOC/train/n01/b.jfif", jpeg_bytes())
    write(root / "Data/CLS-LOC/train/n02/c.JFIF", jpeg_bytes())
    info = build(root, tmp_path / "out", "--splits", "train")
    assert info.splits["train"].class_counts == (2, 1, 0)  # n01, n02, background
    assert not dead_letters(tmp_path / "out")


def test_one_annotation_folder_linked_as_every_splits_keeps_their_xml(tmp_path):
    # All XML in one folder, linked as each split's annotation folder: its links were refused
    # as another split's folder, and validation came out unlabelled, exit 0.
    root = tmp_path / "tree"
    every = tmp_path / "allxml"
    for split, stem, name in (("train", "n01/a", "n01"), ("val", "v", "n01")):
        ilsvrc_image(root, split, stem, jpeg_bytes(), task="CLS-LOC")
        write(every / f"{stem}.xml", voc_xml([(name, 1, 1, 20, 20)]))
    for split in ("train", "val"):
        (root / "Annotations/CLS-LOC").mkdir(parents=True, exist_ok=True)
        os.symlink(every, root / "Annotations/CLS-LOC" / split)
    info = build(root, tmp_path / "out")
    sources = {name: dict(split.label_sources) for name, split in info.splits.items()}
    assert sources == {"train": {"xml": 1}, "validation": {"xml": 1}}
    assert sorted(d["reason"] for d in dead_letters(tmp_path / "out")) == [
        "annotation_without_image",  # each split's view of the other's XML
        "annotation_without_image",
    ]


def test_a_link_into_a_split_not_being_built_is_reported_too(tmp_path):
    # Built one split at a time, --splits val entered val/n09 -> train/n01: train's images.
    root = tmp_path / "tree"
    for i in range(2):
        ilsvrc_image(root, "train", f"n01/a{i}", jpeg_bytes(), task="CLS-LOC")
        ilsvrc_image(root, "val", f"n01/v{i}", jpeg_bytes(), task="CLS-LOC")
    os.symlink(root / "Data/CLS-LOC/train/n01", root / "Data/CLS-LOC/val/n09")
    os.symlink(root / "Data/CLS-LOC", root / "Data/CLS-LOC/all")  # above the splits: no split
    labels = write(tmp_path / "labels.txt", "n01\nn09\n")
    info = build(root, tmp_path / "out", "--splits", "val", "--labels_file", labels)
    assert info.splits["validation"].num_examples == 2
    reasons = sorted((d["reason"], d["path"]) for d in dead_letters(tmp_path / "out"))
    assert reasons == [("directory_visited_twice", str(root / "Data/CLS-LOC/val/n09"))]


def test_an_annotation_or_split_folder_that_is_a_link_to_nothing_is_refused_naming_it(
    tmp_path,
):
    # An Annotations link whose disk is not mounted: the splits were built unlabelled (or
    # with class folders, without boxes), exit 0, and the console said "empty or missing".
    root = tmp_path / "voc" / "VOC2012"
    for i in range(3):
        write(root / "JPEGImages" / f"00000{i}.jpg", jpeg_bytes())
    for split in ("train", "val"):
        write(root / "ImageSets/Main" / f"{split}.txt", "000000\n000001\n000002\n")
    os.symlink(tmp_path / "unmounted/Annotations", root / "Annotations")
    labels = write(tmp_path / "labels.txt", "cat\ndog\n")
    with pytest.raises(LayoutError) as refused:
        build(root, tmp_path / "out", "--labels_file", labels)
    assert str(refused.value) == (
        f"{root}/Annotations is a link to {tmp_path}/unmounted/Annotations, which does not "
        f"exist (a disk not mounted, a copy moved?): a build would find no XML in "
        f"{root}/Annotations for VOC2012's splits. Mount or restore it, or remove the link to "
        "build without those annotations"
    )
    # ImageNet from Kaggle, its val XML on a disk not mounted (the link one level up).
    tree = tmp_path / "ILSVRC"
    ilsvrc_image(tree, "train", "n01/a", jpeg_bytes(), task="CLS-LOC")
    ilsvrc_image(tree, "val", "v", jpeg_bytes(), task="CLS-LOC")
    write(tree / "Annotations/CLS-LOC/train/n01/a.xml", voc_xml([("n01", 1, 1, 9, 9)]))
    os.symlink(tmp_path / "gone", tree / "Annotations/CLS-LOC/val")
    with pytest.raises(LayoutError, match=r"CLS-LOC/val is a link to .*/gone, which does not"):
        build(tree, tmp_path / "out2")
    # A split's image folder: named with its link, not "empty or missing".
    os.unlink(tree / "Annotations/CLS-LOC/val")
    os.symlink(tmp_path / "elsewhere", tree / "Data/CLS-LOC/test")
    with pytest.raises(LayoutError) as refused:
        build(tree, tmp_path / "out3", "--splits", "train,test")
    assert str(refused.value) == (
        f"split 'test' has no images: {tree}/Data/CLS-LOC/test is a link to "
        f"{tmp_path}/elsewhere, which does not exist (a disk not mounted?)"
    )


def test_a_split_folder_mounted_twice_is_refused(tmp_path):
    # train and val bind-mounted from one folder: the paths differ, so only the device and
    # inode tell; validation was a copy of train, exit 0.
    disk = tmp_path / "disk"
    write(disk / "n01" / "a.JPEG", jpeg_bytes())
    root = tmp_path / "tree"
    mounted = []
    try:
        for split in ("train", "val"):
            (root / "Data/CLS-LOC" / split).mkdir(parents=True)
            done = subprocess.run(
                ["mount", "--bind", str(disk), str(root / "Data/CLS-LOC" / split)],
                capture_output=True,
            )
            if done.returncode != 0:
                pytest.skip(f"mount --bind needs privileges here: {done.stderr!r}")
            mounted.append(root / "Data/CLS-LOC" / split)
        with pytest.raises(LayoutError) as refused:
            build(root, tmp_path / "out")
        assert str(refused.value) == (
            f"{root}/Data/CLS-LOC/train and {root}/Data/CLS-LOC/val are one folder (mounted "
            "at both paths: a bind mount): a build would write its images into the train "
            "split and the validation split alike. Give each its own images (findmnt "
            f"{root}/Data/CLS-LOC/val shows the mount)"
        )
    finally:
        for path in mounted:
            subprocess.run(["umount", str(path)], check=True)
