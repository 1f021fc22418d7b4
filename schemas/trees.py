"""Telling an input tree given where a build belongs: the error that names it the tree to build.

A directory without a build's metadata may be the tree itself (ILSVRC's `Data/`, VOC's
`JPEGImages/`, or folders of images, as Keras's `image_dataset_from_directory` reads); the
builder's commands and the loader then say so, rather than to build into it.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas.metadata import NoBuildError
from schemas.paths import join

# Folders of an input tree (ILSVRC's, VOC's, or a download around one), never of a build.
_TREE_FOLDERS = ("Data", "Annotations", "JPEGImages", "ImageSets", "VOCdevkit", "ILSVRC")


def tree_instead_of_build(
    output_dir: str,
    is_dir: Callable[[str], bool],
    list_dir: Callable[[str], list[str]] | None = None,
) -> NoBuildError | None:
    """The error for a directory without a build that is an input tree (it holds `Data/`,
    `JPEGImages/`..., or, where `list_dir` lists it, folders of images: class folders, as
    Keras's `image_dataset_from_directory` reads), naming it as the tree to build; None for
    any other directory."""
    build = f"build it first (python -m beam_pipeline --input_dir {output_dir} --output_dir OUT)"
    for folder in _TREE_FOLDERS:
        if is_dir(join(output_dir, folder)):
            return NoBuildError(
                f"{output_dir} is an input tree (it holds {folder}/), not a build: {build} "
                "and read OUT"
            )
    classes = _image_folders(output_dir, is_dir, list_dir) if list_dir else []
    if classes:
        shown = ", ".join(f"{name}/" for name in classes[:3]) + (", ..." if classes[3:] else "")
        return NoBuildError(
            f"{output_dir} is a folder of image folders ({shown}), not a build: {build} and "
            "read OUT"
        )
    return None


# What a class folder's images are named (a few of them, to tell a tree from a build).
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


def _image_folders(
    directory: str, is_dir: Callable[[str], bool], list_dir: Callable[[str], list[str]]
) -> list[str]:
    """The first folders of `directory` (of at most 20) that hold an image among their first
    100 names; [] where it cannot be listed."""
    try:
        names = sorted(name.rstrip("/") for name in list_dir(directory))
        folders = [name for name in names[:20] if is_dir(join(directory, name))]
        return [
            folder
            for folder in folders
            if any(
                name.lower().endswith(_IMAGE_SUFFIXES)
                for name in list_dir(join(directory, folder))[:100]
            )
        ]
    except OSError:
        return []
