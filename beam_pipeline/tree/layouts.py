"""The three tree layouts: detecting one, and planning what to list for the requested splits.

ILSVRC DET       ROOT/Data/DET/<split>/...X.JPEG       ROOT/Annotations/DET/<split>/...X.xml
ILSVRC CLS-LOC   ROOT/Data/CLS-LOC/<split>/...X.JPEG   ROOT/Annotations/CLS-LOC/<split>/...X.xml
                 (train, and often val: <split>/<synset>/X.JPEG; the folder names the class)
Pascal VOC       ROOT[/VOC2007]/{JPEGImages,Annotations,ImageSets/Main/<split>.txt}

A tree may also lie one level below the directory given (`locate_tree`): download folders
wrap `VOCdevkit/` or `ILSVRC/`.

A plan is a list of directories to walk (`ListingTask`s) and, for VOC, the split lists' image
ids; `pairing` turns what the walks find into index entries. File-system access is injected
(`has_files`, `match`, `read_text`) so this module stays pure and testable; the pipeline passes
`beam_pipeline.tree.fileio`'s.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence

from beam_pipeline.tree.listing import is_skipped_folder, same_folder
from schemas.paths import first_few, is_local, join

ILSVRC_DET = "ilsvrc_det"
ILSVRC_CLS_LOC = "ilsvrc_cls_loc"
VOC = "voc"
LAYOUTS = (ILSVRC_DET, ILSVRC_CLS_LOC, VOC)
AUTO = "auto"

# What a ListingTask's directory holds.
IMAGES = "images"
ANNOTATIONS = "annotations"

DEFAULT_SPLITS = ("train", "val")

# Input split directory or list name → output split name.
_OUTPUT_SPLITS = {"train": "train", "val": "validation", "validation": "validation", "test": "test"}
_VOC_YEAR = re.compile(r"^(.*)/ImageSets/Main/[^/]+\.txt$")


class LayoutError(ValueError):
    """The input tree does not look like what was asked for."""


def has_negatives(layout: str) -> bool:
    """Whether the layout has images of no class (DET and VOC negatives; not CLS-LOC, where
    every image is of one of its classes): only there is an image without objects background."""
    return layout != ILSVRC_CLS_LOC


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
    """The refusal of a directory that is no tree, with where the tree is when that is near:
    above `root` (a folder inside a tree was given) or two levels below (a download folder
    around a `VOCdevkit/`); for a local folder of images, how to link it as a tree."""
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
    if not has_files(root):
        hint = "; it holds no files"
    elif not hint:
        hint = _voc_without_lists_hint(root, has_files, subdirectories)
    if not hint and is_local(root) and subdirectories is not _no_subdirectories:
        hint = _folders_hint(root, subdirectories)
    return LayoutError(
        f"{root} is not an ILSVRC (Data/DET, Data/CLS-LOC) or Pascal VOC "
        "(JPEGImages, Annotations, ImageSets/Main) tree, nor holds one in a subdirectory" + hint
    )


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


_SPLIT_FOLDERS = {"train": "train", "val": "val", "validation": "val", "test": "test"}


# Folder names of other datasets' layouts (Kaggle's, YOLO's, COCO's): never classes.
_NOT_CLASSES = frozenset({"images", "annotations", "labels", "masks", "jpegimages"})


def _folders_hint(root: str, subdirectories: Callable[[str], list[str]]) -> str:
    """How to build a local folder of class folders (or of split folders of class folders) as
    a CLS-LOC tree, whose images without XML take their folder's class: links, no copies.

    Not for a folder with XML below it, or folders named like another layout's (`images/`,
    `annotations/`): linked as class folders, its images would take those names as classes.
    """
    names = subdirectories(root)
    root = posixpath.abspath(root)
    folders = {*names, *(inner for name in names for inner in subdirectories(join(root, name)))}
    if _holds_xml(root) or _NOT_CLASSES & {folder.lower() for folder in folders}:
        return (
            "; it holds annotations in a layout this tool does not read: arrange it as Pascal "
            "VOC (JPEGImages/X.jpg, Annotations/X.xml, ImageSets/Main/<split>.txt listing X)"
        )
    splits: dict[str, str] = {}  # tree split -> folder (`val/` wins over `validation/`)
    for name in names:
        if name.lower() in _SPLIT_FOLDERS:
            splits.setdefault(_SPLIT_FOLDERS[name.lower()], name)
    mkdir = "mkdir -p TREE/Data/CLS-LOC"
    if splits:
        links = " && ".join(
            f"ln -s {shlex.quote(join(root, name))} TREE/Data/CLS-LOC/{split}"
            for split, name in sorted(splits.items())
        )
        labels = "" if "train" in splits else " --labels_file CLASSES.txt"
        return (
            f"; if {', '.join(name + '/' for name in splits.values())} hold one folder per "
            "class, link them into an ILSVRC CLS-LOC tree, whose images take their folder's "
            f"class: {mkdir} && {links}; then --input_dir TREE --splits "
            f"{','.join(sorted(splits))}{labels}"
        )
    if names:
        shown = ", ".join(name + "/" for name in names[:3]) + (", ..." if len(names) > 3 else "")
        return (
            f"; if its folders ({shown}) are one per class, link it as the train split of an "
            f"ILSVRC CLS-LOC tree, whose images take their folder's class: {mkdir} && ln -s "
            f"{shlex.quote(root)} TREE/Data/CLS-LOC/train; then --input_dir TREE --splits train"
        )
    return (
        "; a folder of images without labels builds as an unlabelled test split, with your "
        f"model's classes: {mkdir} && ln -s {shlex.quote(root)} TREE/Data/CLS-LOC/test; then "
        "--input_dir TREE --splits test --labels_file CLASSES.txt"
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
    but exactly one of its subdirectories does, that one is the tree. Several candidates, or
    none, raise LayoutError naming them. `subdirectories` lists a local directory's
    subdirectories that hold files (`fileio.subdirectories`; [] for object stores, where only
    `root` itself is looked at).
    """
    root = root.rstrip("/") or "/"
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


def _voc_years(root: str, match: Callable[[str], list[str]]) -> list[tuple[str, str]]:
    """(year directory, key prefix) of every VOC year at or below `root`."""
    years = []
    if match(join(root, "ImageSets", "Main", "*.txt")):
        years.append((root.rstrip("/"), posixpath.basename(root.rstrip("/"))))
    else:
        for path in match(join(root, "*", "ImageSets", "Main", "*.txt")):
            found = _VOC_YEAR.match(path)
            if found:
                year_dir = found.group(1)
                years.append((year_dir, posixpath.basename(year_dir)))
    return sorted(set(years))


def plan_discovery(
    root: str,
    layout: str,
    splits: Sequence[str],
    has_files: HasFiles,
    match: Callable[[str], list[str]],
    read_text: Callable[[str], str],
    subdirectories: Callable[[str], list[str]] = lambda _: [],
    has_top_level_files: Callable[[str, str], bool] = lambda directory, extension: False,
    is_directory: Callable[[str], bool] = lambda _: True,
    without_images: Callable[[str], str | None] = lambda _: None,
) -> DiscoveryPlan:
    """Lists what to walk for the requested input splits (e.g. `train`, `val`).

    `subdirectories` (names of a directory's subdirectories that hold files) serves messages:
    a missing split's names the splits that are there, and the splits not asked for are named.
    `has_top_level_files(directory, extension)` tells a CLS-LOC split whose XML lie flat.
    `is_directory` finds the image folders of an annotated split whose annotation folder is
    missing (`_refuse_missing_annotation_folders`). `without_images(directory)` says what a
    split folder holds instead of images (None when it holds one).
    """
    root = root.rstrip("/")
    if layout == VOC:
        plan = _plan_voc(root, splits, match, read_text)
        folders = [task.directory for task in plan.tasks if task.kind == IMAGES]
        if not any(has_files(folder) for folder in folders):
            if cuts := [cut for folder in folders if (cut := dangling_link(folder, root))]:
                raise LayoutError(f"no images: {'; '.join(cuts)} (a disk not mounted?)")
            raise LayoutError(
                f"the split lists name {len(plan.memberships)} images, but "
                f"{', '.join(folders)} {'is' if len(folders) == 1 else 'are'} empty or missing: "
                "put each year's images in its JPEGImages folder (an annotations-only "
                "download has none)"
            )
        _refuse_missing_annotation_folders(_voc_folders(plan, has_files, is_directory))
        _refuse_nested_voc_annotations(plan, match)
        _refuse_unannotated_voc_years(plan, match, read_text)
        folders = [task.directory for task in plan.tasks if task.kind == ANNOTATIONS]
        if not any(has_files(folder) for folder in folders):  # no XML: unlabelled splits
            unannotated = tuple(
                (split, ", ".join(folders)) for split in plan.splits if split != "test"
            )
            plan = dataclasses.replace(plan, unannotated=unannotated)
        _refuse_dangling_annotation_folders(plan)
        return _apart(plan)
    subdir = "DET" if layout == ILSVRC_DET else "CLS-LOC"
    tasks, unannotated, missing = [], [], []
    present = subdirectories(join(root, "Data", subdir))
    for split in splits:
        image_dir = join(root, "Data", subdir, split)
        if not has_files(image_dir):
            if cut := dangling_link(image_dir, root):
                raise LayoutError(f"split {split!r} has no images: {cut} (a disk not mounted?)")
            raise LayoutError(
                f"split {split!r} has no images: {image_dir} is empty or missing; "
                + _choose_splits(present)
            )
        instead = without_images(image_dir)
        if instead is not None:
            raise LayoutError(f"split {split!r} has no images: {image_dir} holds {instead}")
        name = output_split(split)
        folder_classes = layout == ILSVRC_CLS_LOC
        annotation_dir = join(root, "Annotations", subdir, split)
        by_name = folder_classes and has_top_level_files(annotation_dir, ".xml")
        if split != "test" and not has_files(annotation_dir):
            # Class folders label CLS-LOC images without XML (`subdirectories` lists a local
            # directory's; in an object store, one file below a folder tells).
            in_folders = folder_classes and bool(
                subdirectories(image_dir) or has_files(join(image_dir, "*"))
            )
            if not in_folders:
                unannotated.append((name, annotation_dir))
        elif layout == ILSVRC_DET and split != "test":
            missing += _det_folders(image_dir, annotation_dir, subdirectories, is_directory)
        tasks.append(ListingTask(IMAGES, image_dir, name, split, root, folder_classes, by_name))
        tasks.append(
            ListingTask(ANNOTATIONS, annotation_dir, name, split, root, key_by_name=by_name)
        )
    _refuse_missing_annotation_folders(missing)
    unbuilt = tuple(name for name in present if name not in splits and not name.startswith("."))
    plan = DiscoveryPlan(
        layout,
        root,
        tuple(output_split(s) for s in splits),
        tuple(tasks),
        unbuilt=unbuilt,
        unannotated=tuple(unannotated),
    )
    _refuse_dangling_annotation_folders(plan)
    return _apart(plan)


def _apart(plan: DiscoveryPlan) -> DiscoveryPlan:
    """The plan whose tasks know the other tasks' folders of their kind (`foreign`), once no
    two image folders are one (a split folder linked to another split's, or two links to one
    folder): refused, as a build would write the same images into both splits, a validation
    split that is a copy of train. Local trees only (an object store has no links)."""
    reals = {
        task.directory: os.path.realpath(task.directory).rstrip("/") or "/"
        for task in plan.tasks
        if is_local(task.directory)
    }
    images = [task for task in plan.tasks if task.kind == IMAGES and task.directory in reals]
    for number, first in enumerate(images):
        for second in images[number + 1 :]:
            a, b = reals[first.directory], reals[second.directory]
            mounted = not _nested(a, b) and same_folder(first.directory, second.directory)
            if _nested(a, b) or mounted:
                same = f"both {a}" if a == b else f"{a} and {b}, one inside the other"
                shows = f"ls -l {shlex.quote(posixpath.dirname(second.directory))} shows the links"
                if mounted:
                    same = "mounted at both paths: a bind mount"
                    shows = f"findmnt {shlex.quote(second.directory)} shows the mount"
                raise LayoutError(
                    f"{first.directory} and {second.directory} are one folder ({same}): a "
                    f"build would write its images into {_task_name(first)} and "
                    f"{_task_name(second)} alike. Give each its own images ({shows})"
                )
    unbuilt = _unbuilt_split_folders(images, set(reals.values()))
    tasks = tuple(
        dataclasses.replace(
            task,
            foreign=(
                *(reals[other.directory] for other in images if other is not task),
                *unbuilt,
            ),
        )
        if task in images
        else task  # an annotation folder may serve several splits (keys keep them apart)
        for task in plan.tasks
    )
    return dataclasses.replace(plan, tasks=tasks)


def _unbuilt_split_folders(images: Sequence[ListingTask], built: set[str]) -> list[str]:
    """The real paths of the ILSVRC split folders beside those being built (`Data/CLS-LOC/train`
    when only `val` is): a link into one of them would bring that split's images into this
    one (built one split at a time, validation would hold train's images)."""
    parents = {posixpath.dirname(task.directory) for task in images if task.split}
    found = []
    for parent in sorted(parents):
        try:
            with os.scandir(parent) as entries:
                folders = [entry.path for entry in entries if entry.is_dir()]
        except OSError:
            continue
        for folder in sorted(folders):
            real = os.path.realpath(folder)
            # (a link to the folder above the splits is none of them)
            if not any(_nested(real, b) for b in built):
                found.append(real)
    return found


def _task_name(task: ListingTask) -> str:
    return f"the {task.split} split" if task.split else f"{task.key_prefix}'s splits"


# ImageNet DET's folders of negative training images (`ILSVRC2013_train_extra0` ... `extra10`),
# which its download ships without annotation folders: background by design.
_DET_NEGATIVES = re.compile(r"ILSVRC\d{4}_train_extra\d+")


def _det_folders(
    image_dir: str,
    annotation_dir: str,
    subdirectories: Callable[[str], list[str]],
    is_directory: Callable[[str], bool],
) -> list[tuple[str, str]]:
    """(image folder, its missing annotation folder) for the folders of an annotated DET split,
    two levels down (`ILSVRC2014_train_0000`, `ILSVRC2013_train/n01443537`). Not one:
    ImageNet's own negatives (`ILSVRC2013_train_extra*`), nor a link to a folder of the split
    itself or to one above it, which the listing never enters."""
    missing = []
    for name in subdirectories(image_dir):
        images, annotations = join(image_dir, name), join(annotation_dir, name)
        if _links_into(images, image_dir) or _DET_NEGATIVES.fullmatch(name):
            continue
        if not is_directory(annotations):
            missing.append((images, annotations))
            continue
        for inner in subdirectories(images):
            if not _links_into(join(images, inner), image_dir) and not is_directory(
                join(annotations, inner)
            ):
                missing.append((join(images, inner), join(annotations, inner)))
    return missing


def _links_into(path: str, top: str) -> bool:
    """Whether the local folder `path` is a link to `top`, to a folder below it, or to one above
    it (a loop)."""
    if not is_local(path) or not os.path.islink(path):
        return False
    real, top_real = os.path.realpath(path), os.path.realpath(top)
    return _nested(real, top_real)


def _nested(first: str, second: str) -> bool:
    """Whether two real paths are one folder, or one lies inside the other."""
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")


def _voc_folders(
    plan: DiscoveryPlan, has_files: HasFiles, is_directory: Callable[[str], bool]
) -> list[tuple[str, str]]:
    """(JPEGImages, its missing Annotations) of each VOC year whose images go into a split
    with another year's XML."""
    folders = [
        (images.directory, annotations.directory)
        for images, annotations in zip(plan.tasks[::2], plan.tasks[1::2], strict=True)
    ]
    if not any(has_files(annotations) for _, annotations in folders):
        return []  # no year is annotated: the split is unlabelled, or refused without classes
    return [
        (images, annotations)
        for images, annotations in folders
        if not is_directory(annotations) and has_files(images)
    ]


# A VOC year's images of a split that have XML for fewer than this share of them, in a split
# that has XML, beside a year or a split whose images all have theirs, are images without
# their annotations (VOC2012's test download holds XML only for its Action and Layout images;
# a copy cut short loses a block of files), not a few negatives.
_VOC_YEAR_ANNOTATED = 0.9


def _refuse_nested_voc_annotations(plan: DiscoveryPlan, match: Callable[[str], list[str]]) -> None:
    """Refuses a VOC year whose XML lie in folders below its `Annotations` (an archive
    unpacked into it, `Annotations/Annotations/X.xml`; a tool's export folder): VOC pairs
    `JPEGImages/X.jpg` with `Annotations/X.xml` only, so those images came out background,
    or their split unlabelled, with exit 0. Folders that listings skip (`.ipynb_checkpoints`),
    and copies of XML that are in place as well (a backup folder), do not count."""
    for task in plan.tasks:
        if task.kind != ANNOTATIONS:
            continue
        folder = task.directory.rstrip("/")
        below = [path[len(folder) + 1 :] for path in match(join(folder, "*", "**"))]
        # A copy of an XML that is in place too (a backup folder) takes nothing away.
        placed = {posixpath.basename(path).lower() for path in match(join(folder, "*.xml"))}
        nested = [
            path
            for path in below
            if path.lower().endswith(".xml")
            and posixpath.basename(path).lower() not in placed
            and not any(map(is_skipped_folder, path.split("/")[:-1]))
        ]
        if nested:
            shown = first_few(nested, 3)
            raise LayoutError(
                f"{len(nested)} XML file{' lies' if len(nested) == 1 else 's lie'} in folders "
                f"below {folder} ({shown}), where VOC reads {folder}/<image id>.xml only: built, "
                "their images would come out without their objects (background). Move them "
                f"into {folder} itself, or out of the tree"
            )


def _refuse_unannotated_voc_years(
    plan: DiscoveryPlan, match: Callable[[str], list[str]], read_text: Callable[[str], str]
) -> None:
    """Refuses a split with XML where one VOC year's images of it mostly have none while the
    images of another year in that split, or of another split, all have theirs: VOC2012's test
    download (annotations were published only for its Action and Layout images), unpacked
    into VOC2012's trainval or beside VOC2007's annotated test, would come out background but
    for a few `person`s. (A split with no XML at all is unlabelled; an empty annotation folder
    declares its year's images negatives, see `_refuse_missing_annotation_folders`; with no
    split fully annotated, images without XML are the negatives the user means. The year's
    lists not requested count too: building test alone, after trainval, is the same tree.)"""
    folders = {task.key_prefix: task.directory for task in plan.tasks if task.kind == ANNOTATIONS}
    annotated = {
        prefix: {
            posixpath.splitext(posixpath.basename(path))[0]
            for path in match(join(directory, "*"))
            if path.lower().endswith(".xml")
        }
        for prefix, directory in folders.items()
    }
    counts: dict[tuple[str, str], list[int]] = {}  # (split, year) -> [images, with XML]
    missing: dict[tuple[str, str], list[str]] = {}  # (split, year) -> the first ids without
    for key, member in plan.memberships:
        prefix, _, image_id = key.partition("/")
        if prefix in folders:
            count = counts.setdefault((member, prefix), [0, 0])
            count[0] += 1
            count[1] += image_id in annotated[prefix]
            if image_id not in annotated[prefix]:
                missing.setdefault((member, prefix), []).append(image_id)
    for prefix, directory in folders.items():  # the lists not requested, as anchors only
        for name, path in _split_lists(posixpath.dirname(directory), match).items():
            if (output_split(name), prefix) in counts:
                continue
            ids = parse_split_list(read_text(path))
            if ids:
                with_xml = sum(image_id in annotated[prefix] for image_id in ids)
                counts[output_split(name), prefix] = [len(ids), with_xml]
    complete = [group for group, (images, xml) in counts.items() if xml == images]
    for split in plan.splits:
        years = {prefix: counts[split, prefix] for prefix in folders if (split, prefix) in counts}
        if not any(xml for _, xml in years.values()):
            continue  # unlabelled
        lacking = [  # an empty annotation folder says its images are negatives
            prefix
            for prefix, (images, xml) in years.items()
            if xml < _VOC_YEAR_ANNOTATED * images and annotated[prefix]
        ]
        if not lacking:
            continue
        year = lacking[0]
        images, xml = years[year]
        ids = sorted(missing.get((split, year), []))
        named = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
        background = f"background ({named}; VOC's images all hold objects)"
        same_split = [prefix for prefix in years if (split, prefix) in complete]
        if same_split:
            raise LayoutError(
                f"split {split!r}: {xml} of {year}'s {images} images have their XML in "
                f"{folders[year]}, while every one of {', '.join(same_split)}'s has: a build "
                f"would label the other {images - xml} {background}. Build the years apart "
                "(--input_dir "
                f"{shlex.quote(posixpath.dirname(folders[same_split[0]]))} for "
                f"{same_split[0]}'s), or restore {year}'s annotations"
            )
        others = sorted({other for other, prefix in complete if prefix == year})
        if others:
            fix = (
                "Leave test out of --splits (VOC2012's test annotations were published for "
                f"its Action and Layout images only), or restore {year}'s annotations"
                if split == "test"
                else f"Restore {year}'s annotations (a copy cut short?)"
            )
            raise LayoutError(
                f"split {split!r}: {xml} of {year}'s {images} images have their XML in "
                f"{folders[year]}, while every image of its {' and '.join(others)} "
                f"split{'s' if len(others) > 1 else ''} has: a build would label the other "
                f"{images - xml} {background}. {fix}; if those images really hold no object, "
                "give each an XML without <object>"
            )


def dangling_link(path: str, root: str) -> str | None:
    """How a local `path` below `root` is cut off by a link to nothing ("X is a link to Y,
    which does not exist": a disk not mounted, a copy moved), or None. The link may be the
    folder itself or a folder on its way from `root`."""
    if not is_local(path) or not path.startswith(root.rstrip("/") + "/"):
        return None
    current = root.rstrip("/")
    for name in path[len(current) + 1 :].split("/"):
        current = join(current, name)
        if os.path.islink(current) and not os.path.exists(current):
            return f"{current} is a link to {os.readlink(current)}, which does not exist"
        if not os.path.exists(current):
            return None
    return None


def _common(first: str, second: str) -> str:
    return os.path.commonpath([first, second]) if is_local(first) and is_local(second) else ""


def _refuse_dangling_annotation_folders(plan: DiscoveryPlan) -> None:
    """Refuses a plan whose annotation folder (of a split other than test) is a link to
    nothing: its split was built unlabelled, or its images background, exit 0, and the
    console said only that the folder was empty or missing."""
    for task in plan.tasks:
        if task.kind != ANNOTATIONS or task.split == "test":
            continue
        if cut := dangling_link(task.directory, task.root):
            raise LayoutError(
                f"{cut} (a disk not mounted, a copy moved?): a build would find no XML in "
                f"{task.directory} for {_task_name(task)}. Mount or restore it, or remove the "
                "link to build without those annotations"
            )


def _refuse_missing_annotation_folders(missing: Sequence[tuple[str, str]]) -> None:
    """Refuses a tree where an image folder of an annotated split has no annotation folder.

    An image without XML is a negative in DET and VOC (background), but a whole folder of them
    whose XML folder is gone is far more often a copy that lost it (ImageNet's and VOC's own
    images all have XML): building would label every image of the folder background. An empty
    annotation folder says that its images are negatives on purpose.
    """
    if not missing:
        return
    shown = "; ".join(
        f"{images} has no {annotations}"
        + (f" ({cut})" if (cut := dangling_link(annotations, _common(images, annotations))) else "")
        for images, annotations in missing[:5]
    )
    more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
    first = missing[0][1]
    raise LayoutError(
        f"image folders of an annotated split have no annotation folder: {shown}{more}; a "
        "build would label all their images background (no objects). Restore their XML (from "
        "the devkit or the download they came in); if their images really hold no objects, "
        f"create the empty folder to say so, e.g. mkdir -p {shlex.quote(first)}"
    )


def _plan_voc(
    root: str,
    splits: Sequence[str],
    match: Callable[[str], list[str]],
    read_text: Callable[[str], str],
) -> DiscoveryPlan:
    years = _voc_years(root, match)
    if not years:
        raise LayoutError(f"{root} has no ImageSets/Main/*.txt split lists")
    tasks, memberships = [], []
    for year_dir, prefix in years:
        tasks.append(ListingTask(IMAGES, join(year_dir, "JPEGImages"), "", prefix, root))
        tasks.append(ListingTask(ANNOTATIONS, join(year_dir, "Annotations"), "", prefix, root))
        for split in splits:
            list_path = join(year_dir, "ImageSets", "Main", f"{split}.txt")
            if not match(list_path):
                raise LayoutError(
                    f"split {split!r} has no list: {list_path} is missing; "
                    + _choose_voc_splits(years, match, split)
                )
            ids = parse_split_list(read_text(list_path))
            _refuse_ids_with_extensions(list_path, ids)
            for image_id in ids:
                memberships.append((join(prefix, image_id), output_split(split)))
    # The lists not asked for, offered beside what is built: not trainval beside train or val.
    unbuilt = _unbuilt_voc_lists(years, splits, {key for key, _ in memberships}, match, read_text)
    return DiscoveryPlan(
        VOC,
        root,
        tuple(output_split(s) for s in splits),
        tuple(tasks),
        tuple(memberships),
        tuple(name for name in unbuilt if name in _disjoint([*splits, *unbuilt])),
    )


def _unbuilt_voc_lists(
    years: Sequence[tuple[str, str]],
    splits: Sequence[str],
    built: set[str],
    match: Callable[[str], list[str]],
    read_text: Callable[[str], str],
) -> tuple[str, ...]:
    """The split lists not asked for that name images the build leaves out (`test`, not
    `trainval` when `train` and `val` are built), among those every year lists (what
    `--splits` can name: a split missing in one year is refused)."""
    lists: dict[str, list[tuple[str, str]]] = {}  # name -> (key prefix, path) in each year
    for year_dir, prefix in years:
        for name, path in _split_lists(year_dir, match).items():
            if name not in splits:
                lists.setdefault(name, []).append((prefix, path))
    unbuilt = []
    for name, found in sorted(lists.items()):
        if len(found) < len(years):
            continue
        for prefix, path in found:
            if any(join(prefix, i) not in built for i in parse_split_list(read_text(path))):
                unbuilt.append(name)
                break
    return tuple(unbuilt)


def _choose_voc_splits(years: Sequence[tuple[str, str]], match: Callable, missing: str) -> str:
    """The fix for a missing VOC split list: the splits every year lists, and each year's;
    and the year directories to build alone for the `missing` split, if some list it."""
    listed = {}
    for year_dir, prefix in years:
        listed[prefix] = list(_split_lists(year_dir, match))
    if len(listed) == 1:
        return _choose_splits(*listed.values())
    common = [
        name for name in next(iter(listed.values())) if all(name in n for n in listed.values())
    ]
    each = "; ".join(f"{prefix}: {names}" for prefix, names in listed.items())
    having = [year_dir for year_dir, prefix in years if missing in listed[prefix]]
    alone = (
        f"; to build {missing} of the "
        f"{'years that list' if len(having) > 1 else 'year that lists'} it, pass "
        f"{' or '.join(shlex.quote(d) for d in having)} as --input_dir"
        if having
        else ""
    )
    if not common:
        return (
            f"no split is listed in every year ({each}): pass one year's directory as "
            f"--input_dir and its splits with --splits{alone}"
        )
    return (
        f"the splits every year lists are {common}: choose with {_splits_flag(common)} (each "
        f"year lists: {each}){alone}"
    )


def _split_lists(year_dir: str, match: Callable[[str], list[str]]) -> dict[str, str]:
    """Split name → path of a VOC year's split lists, by name (`<class>_<split>.txt`, a class's
    own list, is none)."""
    lists = {}
    for path in match(join(year_dir, "ImageSets", "Main", "*.txt")):
        name = posixpath.basename(path)[: -len(".txt")]
        if "_" not in name:
            lists[name] = path
    return lists


def _choose_splits(present: Sequence[str]) -> str:
    if not present:
        return "name the splits to build with --splits"
    return f"the splits there are {list(present)}: choose with {_splits_flag(present)}"


def vocabulary_split(splits: Sequence[str]) -> str | None:
    """The split whose classes make the vocabulary when no --labels_file names them: train,
    or, without it, VOC's trainval (the VOC2007 protocol trains on trainval, tests on test)."""
    return next((name for name in ("train", "trainval") if name in splits), None)


def _splits_flag(present: Sequence[str]) -> str:
    """`--splits a,b`, and `--labels_file` too when they hold no train (or trainval) split
    (without it the vocabulary is unknown: the next error would say so)."""
    flag = f"--splits {','.join(_disjoint(present))}"
    if vocabulary_split(present) is None:
        flag += " and a --labels_file naming the classes (there is no train split to find them in)"
    return flag


def _disjoint(present: Sequence[str]) -> list[str]:
    """The splits to suggest: not VOC's trainval beside train or val (it is the two of them:
    building it with either would write their images twice)."""
    return [name for name in present if name != "trainval" or not {"train", "val"} & {*present}]


_ID_EXTENSIONS = (".jpg", ".jpeg", ".png", ".xml")


def _refuse_ids_with_extensions(list_path: str, ids: Sequence[str]) -> None:
    """Refuses a VOC split list whose ids (half or more) end in a file extension: VOC lists
    name images by id (`2008_000008`), and ids written as file names (`IMG_001.JPG`) pair
    with no image, so the build failed for a reason elsewhere (no class in train, or every
    image missing) that did not name the list."""
    named = [image_id for image_id in ids if image_id.lower().endswith(_ID_EXTENSIONS)]
    if not named or len(named) * 2 < len(ids):
        return
    raise LayoutError(
        f"{list_path} names images by file name ({first_few(named, 3)}): VOC split lists "
        "name them by id, without the extension (2008_000008 for JPEGImages/2008_000008.jpg). "
        "Strip the extensions: sed -i -E 's/\\.(jpe?g|png|xml)$//I' "
        f"{shlex.quote(list_path)}"
    )


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
