"""From listed files to index entries: classify each path, then pair images with annotations.

`classify` turns one listed path into a `FileRef` with its pairing key (the path below its
image or annotation directory without the extension, prefixed so keys are unique across splits
and VOC years), or a `Rejection` for a file that cannot be one. `pair_files` turns the files
that share a key into one `IndexEntry` per split. Images and XML are never paired by the XML's
`<filename>`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence

from beam_pipeline.core.entries import FileRef, IndexEntry
from beam_pipeline.core.rejections import DISCOVER, Rejection
from beam_pipeline.tree.layouts import ANNOTATIONS, IMAGE_EXTENSIONS, IMAGES, MIXED, ListingTask
from schemas.paths import join

ANNOTATION_EXTENSION = ".xml"
# The reason of an XML file that pairs with no image (reported, not counted).
ANNOTATION_WITHOUT_IMAGE = "annotation_without_image"
# The reason of an image beside a tree's split folders, in no split (reported, not built).
IN_NO_SPLIT = "in_no_split"
# macOS writes `._NAME` beside NAME on file systems without extended attributes (AppleDouble):
# metadata, not an image, however it is named.
APPLE_DOUBLE_PREFIX = "._"


def _is_image_name(task: ListingTask, path: str) -> bool:
    return task.kind != ANNOTATIONS and posixpath.splitext(path)[1].lower() in IMAGE_EXTENSIONS


def file_kind(task: ListingTask, path: str) -> str:
    """IMAGES or ANNOTATIONS: what a file the task found is paired as (in a MIXED folder, an
    `.xml` file is an annotation, any other an image)."""
    if task.kind != MIXED:
        return task.kind
    return ANNOTATIONS if posixpath.splitext(path)[1].lower() == ANNOTATION_EXTENSION else IMAGES


def printable_path(path: str) -> str:
    """The path with undecodable bytes (surrogate escapes) shown as \\udcXX."""
    return path.encode("utf-8", "backslashreplace").decode("utf-8")


def unlisted_rejection(task: ListingTask, path: str, reason: str, detail: str) -> Rejection:
    """A Rejection for something the listing could not read; an image if named like one."""
    return Rejection(
        task.split,
        printable_path(path),
        DISCOVER,
        reason,
        detail,
        is_image=_is_image_name(task, path),
    )


def in_no_split(path: str) -> Rejection:
    """The report of an image beside a tree's split folders (`DiscoveryPlan.outside`): not
    built; in no split, it is no split's image, nor in the error budget."""
    detail = (
        "an image beside the split folders, in no split: not built; to build it, move it into "
        "the split folder it belongs to"
    )
    return Rejection("", printable_path(path), DISCOVER, IN_NO_SPLIT, detail, is_image=False)


def classify(
    task: ListingTask, path: str, num_bytes: int, file_version: int = 0
) -> FileRef | Rejection:
    """Turns one listed file into a FileRef, or a Rejection for a file that cannot be one."""
    relative = path[len(task.directory.rstrip("/")) + 1 :]
    stem, extension = posixpath.splitext(relative)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return unlisted_rejection(
            task, path, "undecodable_path", "the file name is not valid UTF-8"
        )
    if posixpath.basename(path).startswith(APPLE_DOUBLE_PREFIX):
        return _stray(
            task,
            path,
            "a macOS metadata file (AppleDouble '._' file, made when a tree is copied from a Mac)",
        )
    image = _is_image_name(task, path)
    wanted = image or (task.kind != IMAGES and extension.lower() == ANNOTATION_EXTENSION)
    if not wanted:
        return _stray(task, path, _not_wanted(task, path, extension))
    folder_class = None
    if task.folder_classes and "/" in relative:
        folder_class = relative.split("/", 1)[0]
    return FileRef(
        relative_path=path[len(task.root) + 1 :],
        key=join(task.key_prefix, posixpath.basename(stem) if task.key_by_name else stem),
        split=task.split,
        num_bytes=num_bytes,
        folder_class=folder_class,
        # (an image's only: an XML is parsed anew on --resume; 32 bytes an int, in the index)
        file_version=file_version if image else 0,
    )


# Files that file managers leave in folders, named for what they are
_SYSTEM_FILES = {
    ".ds_store": "macOS's folder view settings (.DS_Store)",
    "thumbs.db": "Windows' thumbnail cache (Thumbs.db)",
    "desktop.ini": "Windows' folder settings (desktop.ini)",
}


def _not_wanted(task: ListingTask, path: str, extension: str) -> str:
    """Why a listed file is no image (nor, in an annotation folder, an XML file)."""
    name = posixpath.basename(path)
    if name.lower() in _SYSTEM_FILES:
        return f"{_SYSTEM_FILES[name.lower()]}, not part of the dataset"
    what = {IMAGES: "an image", ANNOTATIONS: "an image's XML annotation"}.get(
        task.kind, "an image or its XML annotation"
    )
    named = f"extension {extension!r}" if extension else "no extension"
    if extension.lower() in _UNREAD_PHOTOS and task.kind != ANNOTATIONS:
        return f"{_UNREAD_PHOTOS[extension.lower()]} (extension {extension!r}): convert it to JPEG"
    return f"not {what} by its name ({named})"


# Photo formats cameras and phones write that the build does not read.
_UNREAD_PHOTOS = {
    ".heic": "a HEIF photo (iPhones' default), which Pillow cannot read",
    ".heif": "a HEIF photo, which Pillow cannot read",
    ".avif": "an AVIF image, which the build does not read",
    ".dng": "a camera's raw photo",
    ".cr2": "a camera's raw photo",
    ".nef": "a camera's raw photo",
    ".arw": "a camera's raw photo",
}


def _stray(task: ListingTask, path: str, detail: str) -> Rejection:
    """A file that is neither an image nor an XML where it lies: reported, not counted."""
    reason = "not_an_annotation_file" if task.kind == ANNOTATIONS else "not_an_image_file"
    return Rejection(task.split, path, DISCOVER, reason, detail, is_image=False)


def pair_files(
    key: str,
    images: Iterable[FileRef],
    annotations: Iterable[FileRef],
    listed_splits: Iterable[str],
    root: str,
) -> tuple[list[IndexEntry], list[Rejection]]:
    """Pairs the files that share one key into index entries (one per split). Images of one
    key (`x.JPEG` and `x.png`) are ambiguous where an XML or a split list has the key (which
    one it names is unknown): rejected; without one, each is an entry of its own.

    `listed_splits` are the splits whose lists name the key (VOC); for ILSVRC the split comes
    from the files' own directory. Rejections name full paths (under `root`).
    """
    images = sorted(images, key=_relative_path)
    annotations = sorted(annotations, key=_relative_path)
    listed_splits = sorted(set(listed_splits))
    splits = sorted(set(listed_splits) | {ref.split for ref in images + annotations if ref.split})
    if len(annotations) > 1 or (len(images) > 1 and (annotations or listed_splits)):
        return [], _ambiguous_key(key, images, annotations, splits, root)
    annotation = annotations[0] if annotations else None
    if not images:
        return [], _without_image(key, annotation, listed_splits, root)
    if len(images) > 1:  # no XML to tell them apart for: each is an entry, its path in its key
        return [_entry(s, f"{key}\0{i.relative_path}", i, None) for i in images for s in splits], []
    return [_entry(split, key, images[0], annotation) for split in splits], []


def _ambiguous_key(
    key: str,
    images: Sequence[FileRef],
    annotations: Sequence[FileRef],
    splits: Sequence[str],
    root: str,
) -> list[Rejection]:
    """Every image of a key that several images or annotations share, rejected in each split."""
    paths = [join(root, ref.relative_path) for ref in (*images, *annotations)]
    return [
        Rejection(
            split,
            join(root, ref.relative_path),
            DISCOVER,
            "ambiguous_key",
            f"several files share the key {key!r}: {paths}",
        )
        for split in splits
        for ref in images
    ]


def _without_image(
    key: str, annotation: FileRef | None, listed_splits: Sequence[str], root: str
) -> list[Rejection]:
    """An annotation whose image is missing (reported), and each split list naming no image."""
    rejections = []
    if annotation is not None and annotation.split:
        rejections.append(
            Rejection(
                annotation.split,
                join(root, annotation.relative_path),
                DISCOVER,
                ANNOTATION_WITHOUT_IMAGE,
                f"no image with the key {key!r}",
                is_image=False,
            )
        )
    stem, extension = posixpath.splitext(key)
    hint = ""
    if extension.lower() in IMAGE_EXTENSIONS | {ANNOTATION_EXTENSION}:
        hint = f" (a list names an image by its id, without extension: {posixpath.basename(stem)})"
    elif not key.isascii():
        hint = (
            " (if its image is there, named in another Unicode form, as a tree copied from a Mac "
            "has decomposed names, it has another key: rename it as the list writes it)"
        )
    for split in listed_splits:
        rejections.append(
            Rejection(
                split,
                key,
                DISCOVER,
                "image_missing",
                f"the {split} list names {key!r} but no image has that key{hint}",
            )
        )
    return rejections


def _entry(split: str, key: str, image: FileRef, annotation: FileRef | None) -> IndexEntry:
    return IndexEntry(
        split=split,
        key=key,
        filename=image.relative_path,
        annotation_filename=annotation.relative_path if annotation else None,
        folder_class=image.folder_class,
        num_bytes=image.num_bytes,
        file_version=image.file_version,
    )


def _relative_path(ref: FileRef) -> str:
    return ref.relative_path
