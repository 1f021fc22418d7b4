"""The three tree layouts, what a plan of one holds, and detecting and locating one in a tree.

ILSVRC DET       ROOT/Data/DET/<split>/...X.JPEG       ROOT/Annotations/DET/<split>/...X.xml
ILSVRC CLS-LOC   ROOT/Data/CLS-LOC/<split>/...X.JPEG   ROOT/Annotations/CLS-LOC/<split>/...X.xml
                 (train, and often val: <split>/<synset>/X.JPEG; the folder names the class)
Pascal VOC       ROOT[/VOC2007]/{JPEGImages,Annotations,ImageSets/Main/<split>.txt}
Class folders    ROOT/<class>/...X.jpg, or ROOT/<split>/<class>/...X.jpg (Keras's
                 `image_dataset_from_directory` layout; local trees are detected, others named
                 with --layout class_folders)
VOC XML          ROOT[/<split>]/...X.jpg beside ...X.xml (Roboflow's export), or
                 ROOT[/<split>]/images/X.jpg with ROOT[/<split>]/annotations/X.xml (Kaggle's)

A tree may also lie one level below the directory given (`locate_tree`): download folders
wrap `VOCdevkit/` or `ILSVRC/`.

A plan (`DiscoveryPlan`, made by `planner.plan_discovery`) is a list of directories to walk
(`ListingTask`s) and, for VOC, the split lists' image ids; `pairing` turns what the walks find
into index entries; `refusals` holds the checks of a plan that would come out mislabelled.
File-system access is injected (`has_files`, `match`, `read_text`) so these modules stay pure and
testable; the pipeline passes `beam_pipeline.tree.fileio`'s.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Callable

from schemas.paths import is_local, join

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
    """

    layout: str
    root: str
    splits: tuple[str, ...]
    tasks: tuple[ListingTask, ...]
    memberships: tuple[tuple[str, str], ...] = ()
    unbuilt: tuple[str, ...] = ()
    unannotated: tuple[tuple[str, str], ...] = ()

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
    """The file-system questions a plan asks of a tree (`fileio.TREE_ACCESS` answers them; a
    test may answer a few). `subdirectories` (names of a directory's subdirectories that hold
    files) serves messages: a missing split's names the splits that are there, and the splits
    not asked for are named. `has_top_level_files(directory, extension)` tells a CLS-LOC split
    whose XML lie flat. `is_directory` finds the image folders of an annotated split whose
    annotation folder is missing. `without_images(directory)` says what a split folder holds
    instead of images (None when it holds one)."""

    has_files: HasFiles
    match: Callable[[str], list[str]]
    read_text: Callable[[str], str] | None = None
    subdirectories: Callable[[str], list[str]] = _none
    has_top_level_files: Callable[[str, str], bool] = lambda directory, extension: False
    is_directory: Callable[[str], bool] = lambda _: True
    without_images: Callable[[str], str | None] = lambda _: None


_MAX_LOOKED_AT = 50  # subdirectories looked into for a hint where the tree is
# Folders whose files make a directory a tree of a layout, if a broken one.
_MARKERS = {
    ILSVRC_DET: ("Data", "Annotations"),
    ILSVRC_CLS_LOC: ("Data", "Annotations"),
    VOC: ("JPEGImages", "Annotations", "*/JPEGImages"),
}
# The folders of a tree root (or of a VOC year) that builds list.
TREE_FOLDERS = frozenset({"Data", "Annotations", "JPEGImages", "ImageSets"})


def _layouts_at(root: str, has_files: HasFiles) -> list[str]:
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


def _no_subdirectories(_: str) -> list[str]:
    """The default where folders cannot be listed (object stores): no hints from them."""
    return []


def _not_a_tree(
    root: str, has_files: HasFiles, subdirectories: Callable[[str], list[str]] = _no_subdirectories
) -> LayoutError:
    """The refusal of a directory that is no tree, with where the tree is when that is near
    (`_tree_near`); for a local folder of images, why it is no tree of class folders either."""
    hint = _tree_near(root, has_files, subdirectories)
    if not has_files(root):
        hint = "; it holds no files"
    elif not hint:
        hint = _voc_without_lists_hint(root, has_files, subdirectories)
    if not hint and is_local(root) and subdirectories is not _no_subdirectories:
        hint = _folders_hint(root, subdirectories)
    elif not hint and not is_local(root):
        hint = (
            "; folders of classes, or of images with their VOC XML, are not detected in an "
            "object store: name them with --layout class_folders or --layout voc_xml"
        )
    return LayoutError(
        f"{root} is not an ILSVRC (Data/DET, Data/CLS-LOC) or Pascal VOC "
        "(JPEGImages, Annotations, ImageSets/Main) tree, nor holds one in a subdirectory" + hint
    )


def _tree_near(root: str, has_files: HasFiles, subdirectories: Callable[[str], list[str]]) -> str:
    """Where the ILSVRC or VOC tree is, when `root` is none but one is near: above it (a folder
    inside a tree was given) or two levels below (a download folder around a `VOCdevkit/`);
    "" when none is."""
    hint = ""
    parent = root
    for _ in range(4):
        parent = posixpath.dirname(parent)
        if parent in ("", "/"):
            break
        top = root[len(parent) :].lstrip("/").split("/", 1)[0]  # root's folder in parent
        found = _layouts_at(parent, has_files) if top in TREE_FOLDERS else []
        if found:
            hint = f"; it lies inside the {found[0]} tree {parent}: pass that as --input_dir"
            break
    if not hint:
        deeper = [
            join(root, name, inner)
            for name in subdirectories(root)[:_MAX_LOOKED_AT]
            for inner in subdirectories(join(root, name))[:_MAX_LOOKED_AT]
            if _layouts_at(join(root, name, inner), has_files)
        ]
        if deeper:
            hint = f"; a tree lies two levels below it: pass {' or '.join(deeper)} as --input_dir"
    return hint


def _voc_without_lists_hint(
    root: str, has_files: HasFiles, subdirectories: Callable[[str], list[str]]
) -> str:
    """For a VOC year (or a VOCdevkit of them) with images and XML but no detection split
    lists (`ImageSets/Main/`), up to two levels below `root` (a download folder around a
    VOCdevkit): what is missing, and the lists it has instead."""
    below = [join(root, name) for name in subdirectories(root)[:_MAX_LOOKED_AT]]
    deeper = [join(d, name) for d in below for name in subdirectories(d)[:_MAX_LOOKED_AT]]
    years = [root, *below, *deeper]
    for year in years:
        if has_files(join(year, "JPEGImages")) and has_files(join(year, "Annotations")):
            others = [name for name in subdirectories(join(year, "ImageSets")) if name != "Main"]
            instead = f" (its ImageSets/ holds {', '.join(others)}/ lists)" if others else ""
            return (
                f"; {year} is a Pascal VOC year without its detection split lists: "
                f"{join(year, 'ImageSets', 'Main')}/<split>.txt is missing{instead}. Restore "
                "them from the VOC download, or write them: one image id (its file name "
                "without .jpg) per line, e.g. ImageSets/Main/train.txt"
            )
    return ""


# Split folders of a class-folder or VOC XML tree, by lower-case name, and the tree split each
# is (Roboflow's exports name theirs train/, valid/, test/).
SPLIT_FOLDERS = {
    "train": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "test": "test",
}


# Folder names of other datasets' layouts (Kaggle's, YOLO's, COCO's): never classes.
_NOT_CLASSES = frozenset({"images", "annotations", "labels", "masks", "jpegimages"})


def find_class_folders(
    root: str, subdirectories: Callable[[str], list[str]], at_least: int = 1
) -> str | None:
    """The root of the class-folder tree at the local directory `root` (or in its one
    subfolder, a download folder around the folder of classes), or None: `at_least` folders
    that hold files (detection asks for 2: one folder of images is no classifier's data),
    none named like another layout's (`images/`, `annotations/`), and no `.xml` file below
    (annotations this layout would ignore)."""
    if not is_local(root):
        return None
    names = subdirectories(root)
    if len(names) == 1 and names[0].lower() not in SPLIT_FOLDERS:
        inner = join(root, names[0])
        if subdirectories(inner) and not _images_at(inner):
            root, names = inner, subdirectories(inner)  # photos/flowers/{daisy,rose}
    if len(names) < at_least and not any(name.lower() in SPLIT_FOLDERS for name in names):
        return None
    folders = {*names, *(inner for name in names for inner in subdirectories(join(root, name)))}
    if _holds_xml(root) or _NOT_CLASSES & {folder.lower() for folder in folders}:
        return None
    return root


# The folder pairs of Kaggle's VOC exports, by lower-case name: images, and their XML.
IMAGE_FOLDERS = ("images", "jpegimages", "imgs")
ANNOTATION_FOLDERS = ("annotations", "xml", "xmls")


def find_voc_xml(root: str, subdirectories: Callable[[str], list[str]]) -> str | None:
    """The root of the tree of images with Pascal VOC XML where they lie at the local
    directory `root` (or in its one subfolder, a download folder around it), or None: an
    `.xml` file below it, and no `ImageSets/` (a VOC year without split lists is refused
    apart, naming the lists)."""
    if not is_local(root) or not _holds_xml(root):
        return None
    names = subdirectories(root)
    known = {*SPLIT_FOLDERS, *IMAGE_FOLDERS, *ANNOTATION_FOLDERS}
    if len(names) == 1 and names[0].lower() not in known and not _images_at(root):
        return find_voc_xml(join(root, names[0]), subdirectories)  # download/set1/images
    splits = [join(root, name) for name in names if name.lower() in SPLIT_FOLDERS]
    if any("imagesets" in map(str.lower, subdirectories(d)) for d in [root, *splits]):
        return None
    return root


def _images_at(directory: str) -> bool:
    """Whether image files lie directly in the local `directory`."""
    with os.scandir(directory) as entries:
        return any(
            entry.is_file() and os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS
            for entry in entries
        )


def _folders_hint(root: str, subdirectories: Callable[[str], list[str]]) -> str:
    """Why a local folder that is no tree is not built as class folders either: annotations
    in a layout this tool does not read, or images with no folder to name their class."""
    names = subdirectories(root)
    folders = {*names, *(inner for name in names for inner in subdirectories(join(root, name)))}
    if _NOT_CLASSES & {folder.lower() for folder in folders}:
        return (
            "; it holds annotations in a layout this tool does not read (YOLO's labels/, "
            "masks/): export them as Pascal VOC XML, beside each image or in an annotations/ "
            "folder beside images/"
        )
    if len(names) == 1:
        return (
            f"; its one folder ({names[0]}/) would be the only class, and a classifier needs "
            "two: put each class's images in a folder of its own (if they are all one class, "
            "--layout class_folders builds them so)"
        )
    return (
        "; its images lie in no class folder (a folder per class, as Keras's "
        "image_dataset_from_directory reads, labels them). Without labels it builds as an "
        "unlabelled test split, with your model's classes: --layout class_folders --splits "
        "test --labels_file CLASSES.txt"
    )


def _holds_xml(root: str) -> bool:
    """Whether an `.xml` file lies below the local directory `root` (links not followed)."""
    return any(name.lower().endswith(".xml") for _, _, files in os.walk(root) for name in files)


def detect_layout(root: str, has_files: HasFiles) -> str:
    """Names the layout of the tree at `root`; raises LayoutError when it is none or ambiguous."""
    found = _layouts_at(root, has_files)
    if not found:
        raise _not_a_tree(root, has_files)
    if len(found) > 1:
        raise LayoutError(f"{root} holds several layouts {found}; choose one with --layout")
    return found[0]


def locate_tree(
    root: str,
    layout: str,
    has_files: HasFiles,
    subdirectories: Callable[[str], list[str]] = _no_subdirectories,
) -> tuple[str, str]:
    """(tree root, layout): `root` itself, or the one subdirectory that holds the tree.

    Downloads put the tree one level down (`X/VOCdevkit/VOC2007/...`, Kaggle's
    `X/ILSVRC/Data/CLS-LOC/...`); when `root` holds no tree of the wanted layout (`AUTO`: any)
    but exactly one of its subdirectories does, that one is the tree. A local folder that holds
    no ILSVRC or VOC tree but folders of images is one of class folders
    (`find_class_folders`). Several candidates, or
    none, raise LayoutError naming them. `subdirectories` lists a local directory's
    subdirectories that hold files (`fileio.subdirectories`; [] for object stores, where only
    `root` itself is looked at).
    """
    root = root.rstrip("/") or "/"
    if layout == CLASS_FOLDERS:  # named: no other layout is looked for
        return find_class_folders(root, subdirectories) or root, CLASS_FOLDERS
    if layout == VOC_XML:
        return find_voc_xml(root, subdirectories) or root, VOC_XML
    wanted = LAYOUTS if layout == AUTO else (layout,)
    here = [found for found in _layouts_at(root, has_files) if found in wanted]
    if here:
        return root, (detect_layout(root, has_files) if layout == AUTO else layout)
    below = [
        (join(root, name), found)
        for name in subdirectories(root)
        for found in _layouts_at(join(root, name), has_files)
        if found in wanted
    ]
    if len(below) == 1:
        return below[0]
    if len({path for path, _ in below}) == 1:
        names = [found for _, found in below]
        raise LayoutError(f"{below[0][0]} holds several layouts {names}; choose one with --layout")
    if below:
        trees = ", ".join(f"{path} ({found})" for path, found in below)
        raise LayoutError(f"{root} holds several trees: {trees}; pass one as --input_dir")
    near = layout != AUTO or _tree_near(root, has_files, subdirectories)
    if not near and (found := find_voc_xml(root, subdirectories)):
        return found, VOC_XML
    if not near and (folders := find_class_folders(root, subdirectories, at_least=2)):
        return folders, CLASS_FOLDERS
    if layout != AUTO:
        other = [(root, found) for found in _layouts_at(root, has_files)] or [
            (join(root, name), found)
            for name in subdirectories(root)
            for found in _layouts_at(join(root, name), has_files)
        ]
        if other:
            path, found = other[0]
            raise LayoutError(
                f"{path} holds the layout {found!r}, not {layout!r}: pass --layout {found} or "
                "leave --layout out (it is detected)"
            )
        if any(has_files(join(root, folder)) for folder in _MARKERS[layout]):
            return root, layout  # a tree with a gap: plan_discovery names what is missing
    raise _not_a_tree(root, has_files, subdirectories)


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
