"""The tree's folders as a plan asks them: what they hold, their subdirectories, empty classes.

Whether a folder holds files, images or a kind of file at its top, its subdirectories, the
class folders that hold no image, and `TREE_ACCESS`, the file system as `layouts.TreeAccess`
asks it. Local folders are scanned; in an object store, objects are matched by prefix.

A folder that cannot be listed or entered is never taken for an empty one: `has_files` and
`subdirectories` refuse it (`refusals.refuse_unlistable`), naming it and the fix.
"""

from __future__ import annotations

import collections
import os
import posixpath
import re
from collections.abc import Iterable

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.tree.fileio import read_text
from beam_pipeline.tree.layouts import LayoutError, TreeAccess
from beam_pipeline.tree.listing import Listed, is_below, is_skipped_folder, list_tree, same_folder
from beam_pipeline.tree.pairing import IMAGE_EXTENSIONS, printable_path
from beam_pipeline.tree.refusals import refuse_unlistable
from schemas.paths import first_few, is_local, join


def has_files(directory: str) -> bool:
    """Whether any file lies below `directory` (a path, or a glob pattern)."""
    if "*" in directory or not is_local(directory):
        (result,) = FileSystems.match([join(directory, "**")], limits=[1])
        return bool(result.metadata_list)
    refuse_unlistable(directory)
    return any(isinstance(item, Listed) for item in list_tree(directory))


_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".zip")


def without_images(directory: str) -> str | None:
    """None when an image file (by its name) lies below the local `directory`, or it is not
    local; else what lies there instead, for the refusal of a split with no images to build
    (ImageNet's train folder still holding its 1,000 class archives, say)."""
    if not is_local(directory):
        return None
    others = []
    for item in list_tree(directory):
        if isinstance(item, Listed):
            name = posixpath.basename(item.path)
            if posixpath.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
                return None
            others.append(name)
    shown = first_few(others, 3)
    what = f"{len(others)} file{'s' if len(others) != 1 else ''}, no image: {shown}"
    if any(name.lower().endswith(_ARCHIVES) for name in others):
        what += (
            "; extract the archives first (ImageNet's train comes as one .tar per class: in "
            'that folder, for f in *.tar; do mkdir "${f%.tar}" && tar -xf "$f" -C '
            '"${f%.tar}"; done, then move the archives out)'
        )
    return what


def has_top_level_files(directory: str, extension: str) -> bool:
    """Whether a file named `*extension` lies directly in `directory`, not below a folder of it.

    Locally one directory scan, stopping at the first such file. An object store lists every
    object below a prefix (all of ImageNet's train XML to find none at the top), so there the
    answer is whether ImageNet's first validation file is there (`ILSVRC2012_val_00000001`).
    """
    if not is_local(directory):
        return FileSystems.exists(join(directory, f"ILSVRC2012_val_00000001{extension}"))
    try:
        with os.scandir(directory) as entries:
            return any(e.name.lower().endswith(extension) and _is_file(e) for e in entries)
    except OSError:
        return False


def top_level_images(directory: str) -> list[str]:
    """Names of the images (by extension) directly in a local `directory`, sorted; [] for a
    remote one (an object store would list every object below the prefix)."""
    return _top_level(directory, IMAGE_EXTENSIONS)


# Label tables other tools keep beside an image tree (TFRecorder's data.csv, a competition's
# train.csv): not read here, and said so where they lie beside split folders.
TABLE_EXTENSIONS = frozenset({".csv", ".tsv"})


def top_level_tables(directory: str) -> list[str]:
    """Names of the CSV and TSV files directly in a local `directory`, sorted ([] remote)."""
    return _top_level(directory, TABLE_EXTENSIONS)


def _top_level(directory: str, extensions: frozenset[str]) -> list[str]:
    if not is_local(directory):
        return []
    try:
        with os.scandir(directory) as entries:
            return sorted(
                e.name
                for e in entries
                if posixpath.splitext(e.name)[1].lower() in extensions and _is_file(e)
            )
    except OSError:
        return []


def subdirectories(directory: str) -> list[str]:
    """Names of the subdirectories of a local `directory` that hold files (other than hidden
    ones), sorted; never a folder that listings skip (`listing.is_skipped_folder`).

    Object stores have no directories to list cheaply: [] for remote paths (callers use this
    for messages, and to find a tree one level down).
    """
    if not is_local(directory):
        return []
    refuse_unlistable(directory)  # (one that cannot be listed or entered is not "none")
    if not os.path.isdir(directory):
        return []
    names = sorted(
        entry.name
        for entry in os.scandir(directory)
        if _is_dir(entry) and not is_skipped_folder(entry.name)
    )
    return [name for name in names if _held(join(directory, name))]


def _held(folder: str) -> bool:
    """Whether a subdirectory holds files, or may: one that cannot be listed is kept, and
    refused where it is read (`refuse_unlistable`), not taken for an empty one."""
    try:
        refuse_unlistable(folder)
    except LayoutError:
        return True
    return _has_visible_files(folder)


def classes_without_images(directory: str, foreign: Iterable[str] = ()) -> list[str]:
    """The classes of a local class-folder split that hold no image, sorted: its class folders
    (subdirectories, but those that listings skip) below which no image lies, and ImageNet's
    per-class archives beside them (`n01440764.tar`) whose class has no folder of images: a
    class not extracted yet. (Another archive, such as the whole `ILSVRC2012_img_train.tar`
    left where it was unpacked, or a class's archive beside its extracted folder, is not a
    class; the listing reports it.) [] for an object store's path, which has no empty folders
    and no cheap way to look into ImageNet's 1,000.

    A class folder that is a link the listing does not enter is one too, named with why: a
    link to nothing (its target missing, or a loop), or one to a folder of this split or of
    another (`foreign`: their real paths), whose images are listed by their own path; so is
    the second name of one folder (two links to one folder outside the tree, a bind mount),
    whose images would be listed once or under two classes, and a folder whose name is not
    UTF-8 text, whose images are rejected."""
    if not is_local(directory) or not os.path.isdir(directory):
        return []
    real = os.path.realpath(directory)
    with os.scandir(directory) as scanned:
        entries = sorted(scanned, key=lambda entry: entry.name)  # the listing's order
    folders, archives, named = [], [], []
    first: dict[tuple[int, int], os.DirEntry] = {}  # (device, inode) of a folder: its first
    for entry in entries:
        if is_skipped_folder(entry.name):
            continue
        name = printable_path(entry.name)
        if entry.is_symlink() and (why := _unlisted_link(entry, real, foreign)):
            named.append(f"{name} ({why})")
        elif _is_dir(entry):
            identity = _identity(entry.path)
            earlier = first.get(identity) if identity is not None else None
            if earlier is not None and same_folder(entry.path, earlier.path):
                named.append(f"{name} (the same folder as {printable_path(earlier.name)})")
            elif name != entry.name:
                named.append(f"{name} (a name that is not UTF-8 text: its images are rejected)")
            else:
                folders.append(name)
            if identity is not None:
                first.setdefault(identity, entry)
        elif entry.name.lower().endswith(_ARCHIVES):
            archives.append(entry.name)
    empty = [name for name in folders if not _holds_an_image(join(directory, name))]
    full = set(folders) - set(empty)
    empty = [name + _other_files(join(directory, name)) for name in empty]
    stems = {name: name.split(".", 1)[0] for name in archives}
    classes = [
        name for name, stem in stems.items() if _WORDNET_ID.fullmatch(stem) and stem not in full
    ]
    return sorted(empty + classes + named)


def _other_files(directory: str) -> str:
    """What a class folder holds instead of images, as " (3 .heic files, not images ...)",
    when its files are neither images the build reads nor archives (which the refusal's
    extraction loop is about); "" otherwise."""
    suffixes: collections.Counter[str] = collections.Counter()
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.startswith(".") and _is_file(entry):
                    suffixes[posixpath.splitext(entry.name)[1].lower() or "(none)"] += 1
    except OSError:
        return ""
    if not suffixes or any(suffix in _ARCHIVES for suffix in suffixes):
        return ""
    (suffix, count), *_ = suffixes.most_common(1)
    kind = "files without an extension" if suffix == "(none)" else f"{suffix} files"
    return f" ({count} {kind}, not images the build reads: convert them to JPEG or PNG)"


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of what `path` leads to, to find two names of one folder (then told
    by `same_folder`); None if it cannot be read, or where the file system gives no inode."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino) if status.st_ino else None


def _is_dir(entry: os.DirEntry) -> bool:
    """`entry.is_dir()`, False for a link in a loop (which raises there)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_file(entry: os.DirEntry) -> bool:
    """`entry.is_file()`, False for a link in a loop (which raises there)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _unlisted_link(entry: os.DirEntry, real: str, foreign: Iterable[str]) -> str | None:
    """Why a link in a split's folder names a class the listing will find no image of: it
    leads nowhere (and its name, without an extension, is a folder's), or to a folder that is
    listed by its own path (of this split, or of another); None for a link the listing
    enters."""
    if not _is_dir(entry):
        if os.path.exists(entry.path) or posixpath.splitext(entry.name)[1]:
            return None  # a link to a file, or a file's name: not a class folder
        return "a link to nothing"
    target = os.path.realpath(entry.path)
    if target == join(real, entry.name):
        return None  # the split's folder is reached through a link, not this entry
    for folder in (real, *foreign):
        if target == folder or is_below(target, [folder]):
            return f"a link to {target}, whose images are listed there"
    return None


_WORDNET_ID = re.compile(r"n\d{8}")  # ImageNet's class names, and its per-class archives'


def _holds_an_image(directory: str) -> bool:
    """Whether an image file (by its name) lies below the local `directory`, outside the
    folders listings skip; stops at the first (one directory read for a class of ImageNet,
    where `list_tree` would sort its 1,300 names first)."""
    folders = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir():
                    if not is_skipped_folder(entry.name):
                        folders.append(entry.path)
                elif entry.name.startswith("."):
                    continue  # macOS's ._NAME.JPEG: not an image, and listings skip it
                elif posixpath.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS:
                    return True
    except OSError:
        return True  # unreadable: not this refusal; the listing reports it and fails the build
    return any(_holds_an_image(folder) for folder in folders)


def _has_visible_files(directory: str) -> bool:
    """Whether a file whose name does not start with a dot lies below `directory` (`.DS_Store`
    and macOS's `._NAME` files alone do not make a folder of images)."""
    return any(
        isinstance(item, Listed) and not posixpath.basename(item.path).startswith(".")
        for item in list_tree(directory)
    )


def is_directory(path: str) -> bool:
    """Whether `path` is a directory (an empty one too); in an object store, which has no
    directories, whether any object lies below it."""
    if not is_local(path):
        return has_files(path)
    return os.path.isdir(path)


def match(pattern: str) -> list[str]:
    """The sorted paths that match a glob pattern."""
    (result,) = FileSystems.match([pattern])
    return sorted(m.path for m in result.metadata_list)


# The tree's file system as a plan asks it (`layouts.TreeAccess`).
TREE_ACCESS = TreeAccess(
    has_files,
    match,
    read_text,
    subdirectories,
    has_top_level_files,
    is_directory,
    without_images,
    top_level_images,
    top_level_tables,
)
