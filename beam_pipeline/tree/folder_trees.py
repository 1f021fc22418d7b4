"""The plans of trees laid out in plain folders, split by split folders or not at all.

Class folders (Keras's `image_dataset_from_directory` layout): every image takes the class of
the folder it lies in. There is no XML: a split's images outside any class folder are rejected
(`no_class`), but a split with no class folder at all is unlabelled (a test split of bare
images).

ROOT/<class>/...X.jpg            one split: train (the default), or test (`--splits test`)
ROOT/<split>/<class>/...X.jpg    split folders: train/ (training/), val/ (valid/, validation/),
                                 test/ (testing/), in any case

VOC XML where it lies (Roboflow's and Kaggle's exports): each image paired with the XML of
the same name, beside it or in the annotations folder beside its images folder.

ROOT[/<split>]/...X.jpg, ...X.xml
ROOT[/<split>]/images/X.jpg, ROOT[/<split>]/annotations/X.xml
ROOT/images/<split>/X.jpg, ROOT/annotations/<split>/X.xml
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from collections.abc import Sequence

from beam_pipeline.tree.layouts import (
    ANNOTATION_FOLDERS,
    ANNOTATIONS,
    CLASS_FOLDERS,
    IMAGE_FOLDERS,
    IMAGES,
    MIXED,
    SPLIT_FOLDERS,
    VOC_XML,
    DiscoveryPlan,
    LayoutError,
    ListingTask,
    TreeAccess,
    folder_split,
)
from beam_pipeline.tree.refusals import dangling_link
from schemas.paths import join


def split_folders(root: str, tree: TreeAccess) -> list[str]:
    """The split folders of the tree at `root` (`SPLIT_FOLDERS`' names, in any case), as named
    there, in the order train, val, test; in an object store (no folder listing), those of the
    lower-case names that hold files."""
    names = tree.subdirectories(root) or [
        name for name in SPLIT_FOLDERS if tree.has_files(join(root, name))
    ]
    found = [name for name in names if name.lower() in SPLIT_FOLDERS]
    order = list(SPLIT_FOLDERS)
    return sorted(found, key=lambda name: (order.index(name.lower()), name))


def default_splits(root: str, tree: TreeAccess) -> tuple[str, ...]:
    """The splits a build of the tree makes when `--splits` is not given: every split
    folder (at the root, or inside an export's images folder), or, without them, the root as
    the train split."""
    inner = _inner_splits(root, tree)
    return tuple(split_folders(root, tree) or (inner[2] if inner else ())) or ("train",)


def _paired_folders(directory: str, tree: TreeAccess) -> tuple[str, str] | None:
    """The images folder and the annotations folder side by side in `directory` (Kaggle's
    exports), as named there, or None."""
    names = {folder.lower(): folder for folder in tree.subdirectories(directory)}
    images = next((names[n] for n in IMAGE_FOLDERS if n in names), None)
    annotations = next((names[n] for n in ANNOTATION_FOLDERS if n in names), None)
    return (images, annotations) if images and annotations else None


def _inner_splits(root: str, tree: TreeAccess) -> tuple[str, str, list[str]] | None:
    """(images folder, annotations folder, split folders) of an export whose split folders
    lie inside its images and annotations folders (ROOT/images/train/X.jpg with
    ROOT/annotations/train/X.xml), or None: no split folders at the root and none there."""
    paired = None if split_folders(root, tree) else _paired_folders(root, tree)
    if paired is None:
        return None
    inner = split_folders(join(root, paired[0]), tree)
    return (*paired, inner) if inner else None


def plan_class_folders(root: str, splits: Sequence[str], tree: TreeAccess) -> DiscoveryPlan:
    """Lists each split's folder (the root itself when it has no split folders); refuses
    (LayoutError) split folders beside other folders, a split with no folder, and one whose
    folder is empty."""
    tasks = [
        ListingTask(IMAGES, directory, name, split, root, folder_classes=True)
        for split, name, directory in _split_directories(root, splits, tree)
    ]
    nested = tuple(
        f"{name}/{inner}"
        for task in tasks
        for name in tree.subdirectories(task.directory)
        for inner in tree.subdirectories(join(task.directory, name))
        if inner.lower() in SPLIT_FOLDERS
    )
    if not split_folders(root, tree):
        _refuse_classes_named_like_splits(root, tree)
    plan = _plan(CLASS_FOLDERS, root, splits, tasks, tree)
    notes = [note for task in tasks if (note := _classes_of_classes_note(task.directory, tree))]
    return dataclasses.replace(plan, nested_splits=nested, notes=(*plan.notes, *notes))


# The words other datasets' split folders are named with around a decoration (Kaggle's
# `seg_train/`, `TRAIN_SET/`, `trainset/`), longest first, and the split each is.
_SPLIT_WORDS = {
    "training": "train",
    "train": "train",
    "validation": "val",
    "valid": "val",
    "val": "val",
    "testing": "test",
    "test": "test",
    "prediction": "test",
    "pred": "test",
}


def _named_like_splits(names: Sequence[str]) -> dict[str, str] | None:
    """The split word each of `names` holds, where every name is one with one and the same
    decoration before or after it (`seg_train`, `seg_test`; `TRAIN_SET`, `TEST_SET`), one
    of them a training split and another not; else None (`test_tube` and `train_set` differ)."""
    found, decorations = {}, set()
    for name in names:
        lower = name.lower()
        word = next((w for w in _SPLIT_WORDS if lower.startswith(w) or lower.endswith(w)), None)
        if word is None:
            return None
        found[name] = word
        after = lower.startswith(word)
        decorations.add((after, lower[len(word) :] if after else lower[: -len(word)]))
    splits = {_SPLIT_WORDS[word] for word in found.values()}
    if len(decorations) != 1 or not next(iter(decorations))[1] or len(splits) < 2:
        return None
    return found if "train" in splits else None


def _refuse_classes_named_like_splits(directory: str, tree: TreeAccess) -> None:
    """LayoutError for class folders named like split folders (Kaggle's Intel scenes:
    `seg_train/seg_train/<class>/`, `seg_test/...`): built as classes, each image's label
    would be the split it lies in. The refusal names the folders of classes in each (past a
    download folder's one folder) and the links that lay them out as split folders."""
    found = _named_like_splits(tree.subdirectories(directory))
    if found is None:
        return
    inner: dict[str, str] = {}
    for name in sorted(found, key=lambda name: list(_SPLIT_WORDS).index(found[name])):
        folder = join(directory, name)
        for _ in range(3):  # (a link to its own folder goes on for ever)
            below = tree.subdirectories(folder)
            if len(below) != 1 or tree.top_level_images(folder):
                break
            folder = join(folder, below[0])
        inner.setdefault(_SPLIT_WORDS[found[name]], folder)
    links = " && ".join(f"ln -s {shlex.quote(f)} TREE/{s}" for s, f in inner.items())
    raise LayoutError(
        f"the class folders of {directory} ({', '.join(n + '/' for n in found)}) are named "
        "like split folders: built as classes, each image would be labelled with the split it "
        f"lies in. If they are splits, lay them out as split folders (mkdir TREE && {links}) "
        f"and build --input_dir TREE, or pass one split's class folders as --input_dir "
        f"({inner['train']}); if they are classes, rename them"
    )


def _classes_of_classes_note(directory: str, tree: TreeAccess) -> str | None:
    """The line saying that every class folder of `directory` holds no image of its own but
    folders of them (a folder of datasets given as the tree: `photos/flowers/roses/`,
    `photos/pets/cat/`): each is built as one class, as Keras reads it; said, with the folders
    to pass if those are the classes. None when a class folder holds images (checked first)."""
    classes = tree.subdirectories(directory)
    inner = {}
    for name in classes:
        folder = join(directory, name)
        if tree.top_level_images(folder):
            return None
        inner[name] = [n for n in tree.subdirectories(folder) if n.lower() not in SPLIT_FOLDERS]
        if len(inner[name]) < 2:
            return None
    if len(classes) < 2:
        return None
    shown = [f"{name}/{sub}/" for name in classes for sub in inner[name]]
    more = f" and {len(shown) - 3:,} more" if len(shown) > 3 else ""
    return (
        f"Note: every class folder of {directory} holds folders of images, no image of its own "
        f"({', '.join(shown[:3])}{more}): each is built as one class ({', '.join(classes)}), "
        "its images those of all its folders, as Keras reads them; if the folders inside are "
        f"the classes, pass one of {', '.join(join(directory, n) for n in classes)} as "
        "--input_dir"
    )


def plan_voc_xml(root: str, splits: Sequence[str], tree: TreeAccess) -> DiscoveryPlan:
    """Lists each split's folder (the root itself when it has no split folders): its images
    folder and annotations folder when it has the two (Kaggle's), or else the folder whole,
    images and XML alike (Roboflow's); refuses as `plan_class_folders` does."""
    if inner := _inner_splits(root, tree):
        return _plan_inner_splits(root, splits, inner, tree)
    tasks = []
    for split, name, directory in _split_directories(root, splits, tree):
        paired = _paired_folders(directory, tree)
        if paired:
            tasks.append(ListingTask(IMAGES, join(directory, paired[0]), name, split, root))
            tasks.append(ListingTask(ANNOTATIONS, join(directory, paired[1]), name, split, root))
        else:
            tasks.append(ListingTask(MIXED, directory, name, split, root))
    plan = _plan(VOC_XML, root, splits, tasks, tree)
    if re.fullmatch(r"VOC\d{4}", posixpath.basename(root.rstrip("/")), re.IGNORECASE):
        plan = dataclasses.replace(plan, notes=(*plan.notes, _voc_year_note(root)))
    return plan


def _voc_year_note(root: str) -> str:
    """The line saying that a folder named as a VOC year, without its split lists
    (`ImageSets/Main/`), is built as an export of VOC XML: a copy of VOC2007 that lost its
    lists would put its test images into train."""
    return (
        f"Note: {root} is named as a Pascal VOC year but has no ImageSets/Main/ split lists: "
        "built as an export of VOC XML, its images in the splits of its folders, or one train "
        "split without them; VOC's own splits need its ImageSets/Main/<split>.txt"
    )


def _plan_inner_splits(
    root: str, splits: Sequence[str], inner: tuple[str, str, list[str]], tree: TreeAccess
) -> DiscoveryPlan:
    """The plan of an export with its split folders inside its images and annotations
    folders: each split's images folder with the annotations folder of the same name."""
    images, annotations, folders = inner
    tasks: list[ListingTask] = []
    for split in splits:
        split = _folder_of(split, folders) or split
        if split not in folders:
            raise LayoutError(_no_split_folder(join(root, images), split, folders))
        name = folder_split(split)
        tasks.append(ListingTask(IMAGES, join(root, images, split), name, split, root))
        xml = join(root, annotations, split)
        if tree.has_files(xml):
            tasks.append(ListingTask(ANNOTATIONS, xml, name, split, root))
    built = {task.key_prefix for task in tasks}
    unbuilt = tuple(name for name in folders if name not in built)
    outside = tuple(join(root, images, n) for n in tree.top_level_images(join(root, images)))
    names = tuple(dict.fromkeys(task.split for task in tasks))
    return DiscoveryPlan(VOC_XML, root, names, tuple(tasks), unbuilt=unbuilt, outside=outside)


def _plan(
    layout: str, root: str, splits: Sequence[str], tasks: list[ListingTask], tree: TreeAccess
) -> DiscoveryPlan:
    names = tuple(dict.fromkeys(task.split for task in tasks))
    folders = split_folders(root, tree)
    built = {task.key_prefix for task in tasks}  # (the folders, as named: TRAIN for --splits train)
    unbuilt = tuple(name for name in folders if name not in built)
    outside = tuple(join(root, name) for name in tree.top_level_images(root)) if folders else ()
    tables = tree.top_level_tables(root) if folders else []
    notes = (_tables_note(root, tables, layout),) if tables else ()
    return DiscoveryPlan(
        layout, root, names, tuple(tasks), unbuilt=unbuilt, outside=outside, notes=notes
    )


def _tables_note(root: str, tables: Sequence[str], layout: str) -> str:
    """The line saying that the CSV or TSV files beside a tree's split folders (TFRecorder's
    `data.csv`, say) are not read: labels come from the folders or the XML."""
    shown = ", ".join(tables[:3]) + (f" and {len(tables) - 3:,} more" if len(tables) > 3 else "")
    source = "class folders" if layout == CLASS_FOLDERS else "XML"
    return (
        f"Note: not read: {shown} in {root} beside its split folders; labels come from the "
        f"{source}, not from a table"
    )


# Folder names other datasets give a held-out split; not split names here, since a class may
# bear them: named in the refusal of a tree with split folders beside them.
_OTHER_HELD_OUT_NAMES = ("dev", "eval", "evaluation", "holdout", "test-dev", "testdev")
_SPLIT_NAMES = ", ".join(SPLIT_FOLDERS)


def _split_directories(
    root: str, splits: Sequence[str], tree: TreeAccess
) -> list[tuple[str, str, str]]:
    """(input split, output split, folder) of each split asked for; LayoutError for split
    folders beside other folders, a split with no folder, two folders of one output split, and
    an empty folder."""
    folders = split_folders(root, tree)
    if folders:
        others = [name for name in tree.subdirectories(root) if name not in folders]
        if others:
            held_out = [name for name in others if name.lower() in _OTHER_HELD_OUT_NAMES]
            fix = (
                "move each class folder into the split it belongs to, or pass one split folder "
                f"as --input_dir; or, if {folders[0]}/ is a class, rename it (a class folder "
                f"cannot take a split's name: {_SPLIT_NAMES})"
            )
            if held_out:
                fix = (
                    f"If {held_out[0]}/ is a validation split, rename it val/ (a split folder's "
                    f"names: {_SPLIT_NAMES}); if it is a class, {fix}"
                )
            raise LayoutError(
                f"{root} holds split folders ({', '.join(n + '/' for n in folders)}) beside "
                f"other folders ({', '.join(n + '/' for n in others[:5])}): a build cannot tell "
                f"whether those are classes. {fix[0].upper()}{fix[1:]}"
            )
        directories = {name: join(root, name) for name in folders}
    else:
        directories = {split: root for split in splits[:1] if split in ("train", "test")}
    found: list[tuple[str, str, str]] = []
    for split in splits:
        if split not in directories:
            folder = _folder_of(split, folders)
            if folder is None:
                raise LayoutError(_no_split_folder(root, split, folders))
            split = folder
        name = folder_split(split)
        if name in [output for _, output, _ in found]:
            raise LayoutError(
                f"--splits {','.join(splits)} names two folders of the {name} split: choose one"
            )
        directory = directories[split]
        if not tree.has_files(directory):
            cut = dangling_link(directory, root)
            raise LayoutError(f"split {split!r} has no images: {cut or directory + ' is empty'}")
        found.append((split, name, directory))
    return found


def _folder_of(split: str, folders: Sequence[str]) -> str | None:
    """The folder of `split` among the split folders: its own name, or else the one folder of
    the same split in any case and name (`--splits train,val` on TRAIN/ and VALIDATION/, as the
    build without --splits takes them); None when there is none, or several."""
    if split in folders:
        return split
    same = [f for f in folders if SPLIT_FOLDERS[f.lower()] == SPLIT_FOLDERS.get(split.lower())]
    return same[0] if len(same) == 1 else None


def _no_split_folder(root: str, split: str, folders: Sequence[str]) -> str:
    if folders:
        return (
            f"split {split!r} has no folder in {root}: the splits there are {list(folders)}: "
            f"choose with --splits {','.join(folders)}"
        )
    return (
        f"--splits {split}: {root} holds no split folders (train/, val/, test/): its images "
        "are one split, train (the default; hold out a validation split with "
        "--validation_split 0.2) or test (--splits test)"
    )
