"""A folder of the tree that the build cannot list or enter (its read or execute bit off, for
the user who builds) is refused by name before anything is written: it was taken for an empty
or missing one, and the build went on without it (a split folder, the annotations, VOC's
lists), exit 0.

The tests run as any user (root reads every folder whatever its mode): the folder is locked
where the build asks the operating system, `os.scandir` and `os.stat`, as the kernel answers a
user without those bits (EACCES)."""

from __future__ import annotations

import errno
import os

import pytest
from helpers import build, ilsvrc_image, jpeg_bytes, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tree.layouts import LayoutError


def lock(monkeypatch, folder, *, listable=False):
    """`folder` as its mode 000 (or, `listable`, 644) shows it to its user: listing it (unless
    `listable`) and reaching anything below it fail with EACCES."""
    folder = str(folder)
    real_scandir, real_stat, real_lstat = os.scandir, os.stat, os.lstat

    def denied(path):
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    def below(path):  # (a file descriptor, as shutil.rmtree passes, is not a path)
        return not isinstance(path, int) and os.fspath(path).startswith(folder + "/")

    def scandir(path="."):
        if below(path) or (
            not isinstance(path, int) and os.fspath(path) == folder and not listable
        ):
            raise denied(path)
        return real_scandir(path)

    def stat(path, *args, **kwargs):
        if below(path):
            raise denied(path)
        return real_stat(path, *args, **kwargs)

    def lstat(path, *args, **kwargs):
        if below(path):
            raise denied(path)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "lstat", lstat)


def refusal(folder, done="listed", why="Permission denied"):
    return (
        f"{folder} cannot be {done} ({why}): a build would take what it holds for missing. "
        f"Make it readable (e.g. chmod -R a+rX {folder}), or build as its owner"
    )


def det_tree(root, images=3):
    """ROOT/Data/DET/train/a_N.JPEG, each with its XML (one cat)."""
    for number in range(images):
        xml = voc_xml([("cat", 1, 1, 20, 20)], (32, 32))
        ilsvrc_image(root, "train", f"a_{number}", jpeg_bytes(32, 32), xml)
    return root


def photos(root):
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            write(root / split / name / "0.jpg", jpeg_bytes())
    return root


def test_a_split_folder_that_cannot_be_listed_is_refused(tmp_path, monkeypatch):
    # val/ locked: only train was built, nothing said (exit 0); train/ locked: "without the
    # train split the vocabulary is unknown: pass --labels_file", and with one, val alone.
    root = photos(tmp_path / "photos")
    for split in ("val", "train"):
        with monkeypatch.context() as patched:
            lock(patched, root / split)
            with pytest.raises(LayoutError) as error:
                build(root, tmp_path / "out")
        assert str(error.value) == refusal(root / split)
    assert not (tmp_path / "out").exists()
    assert sorted(build(root, tmp_path / "out").splits) == ["train", "validation"]


def test_annotations_that_cannot_be_listed_are_refused_with_a_labels_file_too(
    tmp_path, monkeypatch
):
    # Annotations/ locked: "Annotations/DET/train is empty or missing", and with the
    # --labels_file that message asked for, every image unlabelled (label -1), exit 0.
    root = det_tree(tmp_path / "det")
    write(tmp_path / "labels.txt", b"cat\n")
    lock(monkeypatch, root / "Annotations")
    for flags in ((), ("--labels_file", tmp_path / "labels.txt")):
        with pytest.raises(LayoutError) as error:
            build(root, tmp_path / "out", "--splits", "train", *flags)
        assert str(error.value) == refusal(root / "Annotations")


def test_voc_lists_that_cannot_be_listed_are_refused_not_read_as_an_export(tmp_path, monkeypatch):
    # ImageSets/ locked: the year built as an export of VOC XML, the test list's images in
    # train, exit 0.
    voc = tmp_path / "VOC2007"
    for name, split in (("a", "trainval"), ("b", "test")):
        write(voc / "JPEGImages" / f"{name}.jpg", jpeg_bytes())
        write(voc / "Annotations" / f"{name}.xml", voc_xml([("cat", 1, 1, 9, 9)], (32, 32)))
        write(voc / "ImageSets/Main" / f"{split}.txt", f"{name}\n".encode())
    lock(monkeypatch, voc / "ImageSets")
    with pytest.raises(LayoutError) as error:
        build(voc, tmp_path / "out")
    assert str(error.value) == refusal(voc / "ImageSets")


def test_a_folder_that_can_be_listed_but_not_entered_is_refused(tmp_path, monkeypatch):
    root = photos(tmp_path / "photos")
    lock(monkeypatch, root / "val", listable=True)
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out")
    assert str(error.value) == refusal(root / "val", "entered", "its execute bit is off")


def test_a_folder_where_an_image_s_xml_would_be_fails_the_build(tmp_path):
    # `mkdir a_1.xml` where its XML was: the image was built as background, exit 0, nothing
    # said (a pipe or a dangling link there failed the build, naming it).
    from beam_pipeline.failures import BuildFailed

    root = det_tree(tmp_path / "det")
    folder = root / "Annotations/DET/train/a_1.xml"
    folder.unlink()
    folder.mkdir()
    with pytest.raises(BuildFailed) as error:
        build(root, tmp_path / "out", "--splits", "train")
    assert str(error.value).startswith(
        f"BUILD FAILED: the tree holds what the build cannot read: {folder} (not_a_regular_file: a "
        "directory, not an XML file); the images inside, or those whose XML it is, would be "
        "missing or labelled background."
    )


def test_lost_and_found_beside_split_folders_is_skipped_not_refused(tmp_path, monkeypatch):
    # A dataset disk's root holds fsck's lost+found, which only root can list: refused as a
    # folder the build cannot list, though it is never part of a dataset.
    root = photos(tmp_path / "disk")
    write(root / "lost+found" / "#1234", b"x")
    lock(monkeypatch, root / "lost+found")
    assert sorted(build(root, tmp_path / "out").splits) == ["train", "validation"]


def test_a_folder_it_cannot_list_beside_the_tree_in_a_download_folder_is_passed_over(
    tmp_path, monkeypatch
):
    # --input_dir a download folder holding the tree and another user's folder: the tree one
    # level down was found before; then the locked folder beside it was refused.
    download = tmp_path / "download"
    det_tree(download / "ILSVRC", images=2)
    write(download / "private" / "notes.txt", b"x")
    lock(monkeypatch, download / "private")
    info = build(download, tmp_path / "out", "--splits", "train")
    assert info.splits["train"].num_examples == 2
