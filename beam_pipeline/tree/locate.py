"""Finding the tree in the directory a user names: its layout detected (ILSVRC DET or CLS-LOC,
Pascal VOC, and, in a local folder that is none of them, class folders or images with their VOC
XML where they lie), the tree one level below it (a download folder), and, when there is none,
the refusal that says where the tree is or why the folder is none (`LayoutError`).

The file system is asked through `has_files` and `subdirectories` (`folders`'); the folder
layouts are detected on local folders only, where `os` lists them.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator
from typing import NoReturn

from beam_pipeline.tree.layouts import (
    ANNOTATION_FOLDERS,
    AUTO,
    CLASS_FOLDERS,
    ILSVRC_CLS_LOC,
    ILSVRC_DET,
    IMAGE_EXTENSIONS,
    IMAGE_FOLDERS,
    LAYOUTS,
    SPLIT_FOLDERS,
    TREE_FOLDERS,
    VOC,
    VOC_XML,
    HasFiles,
    LayoutError,
    layouts_at,
)
from schemas.paths import is_local, join

_MAX_LOOKED_AT = 50  # subdirectories looked into for a hint where the tree is
# Folders whose files make a directory a tree of a layout, if a broken one.
_MARKERS = {
    ILSVRC_DET: ("Data", "Annotations"),
    ILSVRC_CLS_LOC: ("Data", "Annotations"),
    VOC: ("JPEGImages", "Annotations", "*/JPEGImages"),
}


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
        found = layouts_at(parent, has_files) if top in TREE_FOLDERS else []
        if found:
            hint = f"; it lies inside the {found[0]} tree {parent}: pass that as --input_dir"
            break
    if not hint:
        deeper = [
            join(root, name, inner)
            for name in subdirectories(root)[:_MAX_LOOKED_AT]
            for inner in _probed(subdirectories, join(root, name))[:_MAX_LOOKED_AT]
            if _probed(layouts_at, join(root, name, inner), has_files)
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


# Folder names of other datasets' layouts (Kaggle's, YOLO's, COCO's): never classes.
_NOT_CLASSES = frozenset({"images", "annotations", "labels", "masks", "jpegimages"})


def find_class_folders(
    root: str, subdirectories: Callable[[str], list[str]], at_least: int = 1
) -> str | None:
    """The root of the class-folder tree at the local directory `root` (or in its one
    subfolder, a download folder around the folder of classes), or None: `at_least` folders
    that hold files (detection asks for 2: one folder of images is no classifier's data),
    none named like another layout's (`images/`, `annotations/`), and no image's `.xml` below
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


def find_voc_xml(root: str, subdirectories: Callable[[str], list[str]]) -> str | None:
    """The root of the tree of images with Pascal VOC XML where they lie at the local
    directory `root` (or in its one subfolder, a download folder around it), or None: an
    image's `.xml` below it, and no `ImageSets/` (a VOC year without split lists is refused
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
    extensions = _extensions_to_an_image(root)
    if not extensions & IMAGE_EXTENSIONS:  # (it said "its images lie in no class folder")
        xml = "annotations (.xml) but " if ".xml" in extensions else ""
        return (
            f"; it holds {xml}no image file ({', '.join(sorted(IMAGE_EXTENSIONS))}): copy "
            "the images in (beside their XML, or a folder per class)"
        )
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


def _extensions_to_an_image(root: str) -> set[str]:
    """The file extensions below the local directory `root`, as far as the first image's."""
    found: set[str] = set()
    for _, _, files in os.walk(root):
        found.update(os.path.splitext(name)[1].lower() for name in files)
        if found & IMAGE_EXTENSIONS:
            break
    return found


def _holds_xml(root: str) -> bool:
    """Whether an `.xml` file named as an image is (its annotation, by the build's pairing)
    lies below the local directory `root` (links not followed). Another XML (a CVAT or COCO
    export's one file, a README) makes no VOC tree: a folder of classes holding one is built
    as such, the XML reported."""

    def names(extensions) -> Iterator[str]:
        for _, _, files in os.walk(root):
            for name in files:
                stem, extension = os.path.splitext(name)
                if extension.lower() in extensions:
                    yield stem

    xml = set(names({".xml"}))  # (a tree without XML is walked once, as before)
    return bool(xml) and any(stem in xml for stem in names(IMAGE_EXTENSIONS))


def detect_layout(root: str, has_files: HasFiles) -> str:
    """Names the layout of the tree at `root`; raises LayoutError when it is none or ambiguous."""
    found = layouts_at(root, has_files)
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
    subdirectories that hold files (`folders.subdirectories`; [] for object stores, where only
    `root` itself is looked at).
    """
    root = root.rstrip("/") or "/"
    if layout in (CLASS_FOLDERS, VOC_XML):  # named: no other layout is looked for
        return _named_folders(root, layout, has_files, subdirectories), layout
    wanted = LAYOUTS if layout == AUTO else (layout,)
    here = [found for found in layouts_at(root, has_files) if found in wanted]
    if here:
        return root, (detect_layout(root, has_files) if layout == AUTO else layout)
    below = _trees_below(root, wanted, has_files, subdirectories)
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
        other = [(root, found) for found in layouts_at(root, has_files)] or [
            (join(root, name), found)
            for name in subdirectories(root)
            for found in layouts_at(join(root, name), has_files)
        ]
        if other:
            _refuse_layout(*other[0], layout)
        if any(has_files(join(root, folder)) for folder in _MARKERS[layout]):
            return root, layout  # a tree with a gap: plan_discovery names what is missing
        if not _tree_near(root, has_files, subdirectories):  # (inside one: said below)
            if folders := find_class_folders(root, subdirectories, at_least=2):
                _refuse_layout(folders, CLASS_FOLDERS, layout)  # (it said "in no class folder")
            if found := find_voc_xml(root, subdirectories):
                _refuse_layout(found, VOC_XML, layout)
    raise _not_a_tree(root, has_files, subdirectories)


def _trees_below(
    root: str,
    wanted: tuple[str, ...],
    has_files: HasFiles,
    subdirectories: Callable[[str], list[str]],
) -> list[tuple[str, str]]:
    """(path, layout) of the trees of the `wanted` layouts in `root`'s subdirectories, and, when
    there is one, of those a level further down beside it (another tree there went unseen:
    the first one was built)."""
    names = subdirectories(root)
    below = [
        (join(root, name), found)
        for name in names
        for found in _probed(layouts_at, join(root, name), has_files)
        if found in wanted
    ]
    deeper = [
        (join(root, name, inner), found)
        for name in names[:_MAX_LOOKED_AT]
        if len(below) == 1 and join(root, name) != below[0][0]
        for inner in _probed(subdirectories, join(root, name))[:_MAX_LOOKED_AT]
        for found in _probed(layouts_at, join(root, name, inner), has_files)
        if found in wanted
    ]
    return below + deeper


def _probed(ask: Callable[..., list], *args) -> list:
    """`ask(*args)`, or [] where a folder it looks into cannot be listed: a folder beside the
    tree in a download folder (another user's, `lost+found`) is no tree, and if it was the
    one, none is found, which is said (`folders.subdirectories` refuses the tree's own)."""
    try:
        return ask(*args)
    except LayoutError:
        return []


def _named_folders(
    root: str, layout: str, has_files: HasFiles, subdirectories: Callable[[str], list[str]]
) -> str:
    """The root of the class folders or VOC XML named by `--layout`; LayoutError where an
    ILSVRC or VOC tree is here or a folder down (where the finders also look: a download
    folder around it), whose folders would be taken for classes or for XML beside images."""
    others = (ILSVRC_DET, ILSVRC_CLS_LOC) if layout == VOC_XML else LAYOUTS
    years: set[str] = set()
    for path in [root, *(join(root, name) for name in subdirectories(root))]:
        found = layouts_at(path, has_files)
        if standard := [name for name in found if name in others]:
            _refuse_layout(path, standard[0], layout)
        if VOC in found:  # a year, or a devkit of years
            inside = [path, *(join(path, name) for name in subdirectories(path))]
            years |= {year for year in inside if has_files(join(year, "ImageSets", "Main"))}
    if len(years) > 1:  # (it said "the train split names no class": no year's XML paired)
        raise LayoutError(
            f"{root} holds {len(years)} VOC years ({', '.join(sorted(years))}): --layout "
            "voc_xml reads one folder's images beside their XML; pass --layout voc (or leave "
            "--layout out), or one year as --input_dir"
        )
    finder = find_class_folders if layout == CLASS_FOLDERS else find_voc_xml
    return finder(root, subdirectories) or root


def _refuse_layout(path: str, found: str, layout: str) -> NoReturn:
    raise LayoutError(
        f"{path} holds the layout {found!r}, not {layout!r}: pass --layout {found} or leave "
        "--layout out (it is detected)"
    )
