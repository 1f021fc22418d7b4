"""The five tree layouts and what a plan of one holds (`locate` finds one in a directory).

ILSVRC DET       ROOT/Data/DET/<split>/...X.JPEG       ROOT/Annotations/DET/<split>/...X.xml
ILSVRC CLS-LOC   ROOT/Data/CLS-LOC/<split>/...X.JPEG   ROOT/Annotations/CLS-LOC/<split>/...X.xml
                 (train, and often val: <split>/<synset>/X.JPEG; the folder names the class)
Pascal VOC       ROOT[/VOC2007]/{JPEGImages,Annotations,ImageSets/Main/<split>.txt}
Class folders    ROOT/<class>/...X.jpg, or ROOT/<split>/<class>/...X.jpg (Keras's
                 `image_dataset_from_directory` layout; local trees are detected, others named
                 with --layout class_folders)
VOC XML          ROOT[/<split>]/...X.jpg beside ...X.xml (Roboflow's export), or
                 ROOT[/<split>]/images/X.jpg with ROOT[/<split>]/annotations/X.xml (Kaggle's)

A tree may also lie one level below the directory given (`locate.locate_tree`): download
folders wrap `VOCdevkit/` or `ILSVRC/`.

A plan (`DiscoveryPlan`, made by `planner.plan_discovery`) is a list of directories to walk
(`ListingTask`s) and, for VOC, the split lists' image ids; `pairing` turns what the walks find
into index entries; `refusals` holds the checks of a plan that would come out mislabelled.
File-system access is injected (`has_files`, `match`, `read_text`) so these modules stay pure and
testable; the pipeline passes `beam_pipeline.tree.folders`'s.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Callable, Sequence

from schemas.paths import join

ILSVRC_DET = "ilsvrc_det"
ILSVRC_CLS_LOC = "ilsvrc_cls_loc"
VOC = "voc"
CLASS_FOLDERS = "class_folders"
VOC_XML = "voc_xml"
LAYOUTS = (ILSVRC_DET, ILSVRC_CLS_LOC, VOC, CLASS_FOLDERS, VOC_XML)
# Layouts whose every file below the root is listed (no Data/ or JPEGImages/ apart).
FOLDER_LAYOUTS = (CLASS_FOLDERS, VOC_XML)
AUTO = "auto"

# What a ListingTask's directory holds.
IMAGES = "images"
ANNOTATIONS = "annotations"
MIXED = "images and annotations"  # a folder whose XML lie beside their images
# The names of image files (by their extension, in lower case).
IMAGE_EXTENSIONS = frozenset(
    {".jpeg", ".jpg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
)

DEFAULT_SPLITS = ("train", "val")

# Input split directory or list name → output split name.
_OUTPUT_SPLITS = {"train": "train", "val": "validation", "validation": "validation", "test": "test"}
VOC_YEAR = re.compile(r"^(.*)/ImageSets/Main/[^/]+\.txt$")


class LayoutError(ValueError):
    """The input tree does not look like what was asked for."""


def has_negatives(layout: str) -> bool:
    """Whether the layout has images of no class without XML (DET and VOC negatives; not
    CLS-LOC or class folders, where every image is of one of its classes, nor VOC XML where it
    lies, whose exports give an image of no object an XML without <object>): only there is an
    image without XML background."""
    return layout not in (ILSVRC_CLS_LOC, CLASS_FOLDERS, VOC_XML)


def output_split(name: str) -> str:
    """Output name of an input split (`val` → `validation`); other names are kept."""
    return _OUTPUT_SPLITS.get(name, name)


def vocabulary_split(splits: Sequence[str]) -> str | None:
    """The split whose classes make the vocabulary when no --labels_file names them: train,
    or, without it, VOC's trainval (the VOC2007 protocol trains on trainval, tests on test)."""
    return next((name for name in ("train", "trainval") if name in splits), None)


def refuse_unloadable_split(split: str) -> None:
    """ValueError for a split whose output name TFDS cannot load: `all` (every split to it;
    a VOC list `all.txt` was written, then `tfds.load(split="all")` recursed) or a name
    outside its `[\\w-]+` (a split selector's syntax: `train[:10%]+test`)."""
    name = output_split(split)
    if name.lower() == "all" or not re.fullmatch(r"[\w-]+", name):
        raise ValueError(
            f"--splits {split}: the build would write a split named {name!r}, which TFDS "
            "cannot load (to it 'all' is every split together, and a split's name is letters, "
            "digits, '_' and '-', as in 'train[:10%]+test'); rename its list or folder in the "
            "tree"
        )


@dataclasses.dataclass(frozen=True)
class ListingTask:
    """One directory to list recursively.

    Attributes:
      kind: IMAGES or ANNOTATIONS.
      directory: the directory; relative paths (and so pairing keys) start below it.
      split: the output split for everything under it, or "" when split lists decide (VOC).
      key_prefix: prepended to every key so keys are unique across splits and VOC years.
      root: the input root, for the file name stored in the record.
      folder_classes: the first directory below `directory`, if any, names the class (CLS-LOC,
        every split: many copies move `val` into synset folders).
      key_by_name: keys are file names without their folders (a CLS-LOC split whose XML lie
        flat: ImageNet's `valprep.sh` moves the images into synset folders, not the XML).
      foreign: for an image folder, the real paths of the other image folders (local trees):
        a link below `directory` into one of them is reported and not entered, as its images
        are another split's (or VOC year's).
    """

    kind: str
    directory: str
    split: str
    key_prefix: str
    root: str
    folder_classes: bool = False
    key_by_name: bool = False
    foreign: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class DiscoveryPlan:
    """What to list, plus the (key, output split) memberships read from VOC split lists.

    `unbuilt` names the input splits the tree holds but the build was not asked for (a `test`
    folder beside the default `train,val`), so the console can say so; it is found on local
    trees only. `unannotated` holds (output split, annotation directory) for each split other
    than `test` that has no XML (nor, in CLS-LOC, class folders; in VOC, when no year has
    XML): its examples will be unlabelled, which the console says before the build.
    `outside` holds the images of a folder tree that lie beside its split folders, in no
    split (local trees): not built, said so, and reported (`pairing.in_no_split`).
    `nested_splits` names the split folders inside class folders (`cat/train`, `cat/val`):
    built into the split with the rest, and said so.
    `notes`: other lines the console says before the build (a VOC split that some years do not
    list, built from those that do).
    """

    layout: str
    root: str
    splits: tuple[str, ...]
    tasks: tuple[ListingTask, ...]
    memberships: tuple[tuple[str, str], ...] = ()
    unbuilt: tuple[str, ...] = ()
    unannotated: tuple[tuple[str, str], ...] = ()
    outside: tuple[str, ...] = ()
    nested_splits: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def shared_images(self) -> dict[tuple[str, ...], int]:
        """How many images each combination of splits shares (VOC lists may overlap, as
        `trainval` does `train` and `val`); each such image is written once in each split."""
        splits_of: dict[str, set[str]] = {}
        for key, split in self.memberships:
            splits_of.setdefault(key, set()).add(split)
        shared: dict[tuple[str, ...], int] = {}
        for splits in splits_of.values():
            if len(splits) > 1:
                combination = tuple(sorted(splits))
                shared[combination] = shared.get(combination, 0) + 1
        return dict(sorted(shared.items()))


HasFiles = Callable[[str], bool]


def _none(_: str) -> list[str]:
    return []


@dataclasses.dataclass(frozen=True)
class TreeAccess:
    """The file-system questions a plan asks of a tree (`folders.TREE_ACCESS` answers them; a
    test may answer a few). `subdirectories` (names of a directory's subdirectories that hold
    files) serves messages: a missing split's names the splits that are there, and the splits
    not asked for are named. `has_top_level_files(directory, extension)` tells a CLS-LOC split
    whose XML lie flat. `is_directory` finds the image folders of an annotated split whose
    annotation folder is missing. `without_images(directory)` says what a split folder holds
    instead of images (None when it holds one). `top_level_images(directory)` names the images
    directly in a directory (those beside split folders are in no split), `top_level_tables`
    its CSV and TSV files (label tables of other tools, not read: said so)."""

    has_files: HasFiles
    match: Callable[[str], list[str]]
    read_text: Callable[[str], str] | None = None
    subdirectories: Callable[[str], list[str]] = _none
    has_top_level_files: Callable[[str, str], bool] = lambda directory, extension: False
    is_directory: Callable[[str], bool] = lambda _: True
    without_images: Callable[[str], str | None] = lambda _: None
    top_level_images: Callable[[str], list[str]] = _none
    top_level_tables: Callable[[str], list[str]] = _none


# The folders of a tree root (or of a VOC year) that builds list.
TREE_FOLDERS = frozenset({"Data", "Annotations", "JPEGImages", "ImageSets"})


def layouts_at(root: str, has_files: HasFiles) -> list[str]:
    """The layouts whose marker directories hold files at `root` (VOC only when no ILSVRC)."""
    found = []
    if has_files(join(root, "Data", "DET")):
        found.append(ILSVRC_DET)
    if has_files(join(root, "Data", "CLS-LOC")):
        found.append(ILSVRC_CLS_LOC)
    voc_lists = (join(root, "ImageSets", "Main"), join(root, "*", "ImageSets", "Main"))
    if not found and any(has_files(pattern) for pattern in voc_lists):
        found.append(VOC)
    return found


# Split folders of a class-folder or VOC XML tree, by lower-case name, and the tree split each
# is (Roboflow's exports name theirs train/, valid/, test/; Kaggle's Training/, Testing/).
SPLIT_FOLDERS = {
    "train": "train",
    "training": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "test": "test",
    "testing": "test",
}


def folder_split(name: str) -> str:
    """The output split a tree's split folder is written as (`val`, `Valid/`: `validation`)."""
    return output_split(SPLIT_FOLDERS.get(name.lower(), name))


# The folder pairs of Kaggle's VOC exports, by lower-case name: images, and their XML.
IMAGE_FOLDERS = ("images", "jpegimages", "imgs")
ANNOTATION_FOLDERS = ("annotations", "xml", "xmls")


def task_name(task: ListingTask) -> str:
    return f"the {task.split} split" if task.split else f"{task.key_prefix}'s splits"


def split_lists(year_dir: str, match: Callable[[str], list[str]]) -> dict[str, str]:
    """Split name → path of a VOC year's split lists, by name (`<class>_<split>.txt`, a class's
    own list, is none)."""
    lists = {}
    for path in match(join(year_dir, "ImageSets", "Main", "*.txt")):
        name = posixpath.basename(path)[: -len(".txt")]
        if "_" not in name:
            lists[name] = path
    return lists


def parse_split_list(text: str) -> list[str]:
    """Image ids of a VOC ImageSets file: the first word of each line, as VOC's devkit reads
    it (per-class lists add an ` 1` column); a line starting with `#` is a comment, and a `#`
    inside an id is part of it."""
    ids = []
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            ids.append(words[0])
    return ids
