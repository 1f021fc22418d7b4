"""Listing a directory tree, accounting for everything that is not a readable file.

Remote paths (`gs://`, ...) go through Beam's FileSystems. Local paths are walked here, because
Beam's local listing silently drops what it cannot stat (a broken symlink disappears) and never
enters a symlinked directory (a tree of linked class folders would come out empty). This walk
follows directory links, refuses to enter a directory twice (so symlink loops end), lists a
directory of the tree by its own path rather than by a link to it (its XML lie on that path), and
reports broken links, unreadable entries and special files instead of skipping them.

A build lists a tree in parts, on many workers (`list_directory` for the top levels, one
directory at a time, `walk_subtree` below them). Each part reports the directories it entered
(`Entered`), and `revisited` then finds, over all parts of a tree, the directories that the
single walk of `list_tree` would have refused as entered twice: everything found below them is
dropped, so the parts list exactly what the single walk lists.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import posixpath
from collections.abc import Iterable, Iterator, Sequence

from apache_beam.io.filesystems import FileSystems

from schemas.paths import is_local, join


@dataclasses.dataclass(frozen=True)
class Listed:
    path: str
    num_bytes: int
    file_version: int  # what tells that the file changed (`FileRef.file_version`)


def file_version(stat: os.stat_result) -> int:
    """A local file's `FileRef.file_version`: its device, inode and status change time as one
    number (Python's hash of integers is the same in every process)."""
    return hash((stat.st_dev, stat.st_ino, stat.st_ctime_ns))


@dataclasses.dataclass(frozen=True)
class Unlisted:
    """Something in the tree that is not a readable regular file."""

    path: str
    reason: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Entered:
    """A directory a listing entered, and the directory it resolves to."""

    path: str
    real: str


@dataclasses.dataclass(frozen=True)
class Subdirectory:
    """A directory that `list_directory` found and left for another part to list."""

    path: str


# Folders that tools and file servers leave inside a dataset, never part of it: hidden ones
# (Jupyter's `.ipynb_checkpoints` holds copies of the images beside it, `.git`, `.cache`), and
# the thumbnails a Synology NAS writes into every folder, and the `__MACOSX` folder of a zip
# made on a Mac (`._` copies of every file), and `fsck`'s `lost+found` at a disk's root (its
# owner's alone: a build would be refused for the folder it cannot list). Entered, their images
# would be written twice, or, as a class folder, become a class and shift every label after it.
SYNOLOGY_THUMBNAILS = "@eaDir"
MAC_ZIP_FORKS = "__MACOSX"
LOST_AND_FOUND = "lost+found"


def is_skipped_folder(name: str) -> bool:
    """Whether a folder of this name is left out of every listing (and reported)."""
    return name.startswith(".") or name in (SYNOLOGY_THUMBNAILS, MAC_ZIP_FORKS, LOST_AND_FOUND)


def _skipped(path: str) -> Unlisted:
    name = posixpath.basename(path)
    what = {
        SYNOLOGY_THUMBNAILS: "a NAS's thumbnails",
        MAC_ZIP_FORKS: "a Mac zip's file forks",
        LOST_AND_FOUND: "fsck's recovered files",
    }
    return Unlisted(
        path,
        "skipped_folder",
        f"{what.get(name, 'a hidden folder')}, not part of the dataset: not listed",
    )


def list_tree(directory: str, foreign: Sequence[str] = ()) -> Iterator[Listed | Unlisted]:
    """Every file below `directory` in path order; nothing if the directory does not exist.
    A link into one of the `foreign` directories (real paths: the other splits' folders) is
    reported, not entered."""
    if not is_local(directory):
        (result,) = FileSystems.match([join(directory, "**")])
        skipped = set()
        for metadata in sorted(result.metadata_list, key=lambda m: m.path):
            folders = metadata.path[len(directory.rstrip("/")) + 1 :].split("/")[:-1]
            hidden = next((i for i, name in enumerate(folders) if is_skipped_folder(name)), None)
            if hidden is None:
                yield Listed(
                    metadata.path,
                    metadata.size_in_bytes,
                    round(metadata.last_updated_in_seconds * 1e9),
                )
                continue
            folder = join(directory.rstrip("/"), *folders[: hidden + 1])
            if folder not in skipped:
                skipped.add(folder)
                yield _skipped(folder)
        return
    if os.path.isdir(directory):
        root = directory.rstrip("/")
        yield from _walk(root, set(), (root, os.path.realpath(root)), tuple(foreign))


def _visited_twice(path: str, real: str) -> Unlisted:
    return Unlisted(
        path,
        "directory_visited_twice",
        f"resolves to {real}, which was already listed (a symlink loop or a second link)",
    )


def _aliased(path: str, real: str, root: tuple[str, str] | None) -> Unlisted | None:
    """The refusal of a link to a directory of the tree itself, which the walk lists by its
    own path (the XML beside it are found by that path), or None.

    `root`: (the tree's path as walked, its real path); `path` lies below the first.
    """
    if root is None:
        return None
    top, top_real = root
    top_real = top_real.rstrip("/")
    if path != top and _holds(real, top_real):  # (a link to `/` walked the whole disk)
        return Unlisted(
            path,
            "directory_visited_twice",
            f"resolves to {real}, a folder that holds the tree itself (a link to a folder "
            "above it): not listed",
        )
    inside = real == top_real or is_below(real, [top_real])
    if not inside or real == top_real + path[len(top) :]:
        return None
    return Unlisted(
        path,
        "directory_visited_twice",
        f"resolves to {real}, a directory of the tree listed by its own path (a link to it)",
    )


def _holds(directory: str, path: str) -> bool:
    """Whether real path `path` lies below real path `directory` (`/` holds every other)."""
    return path != directory and path.startswith(directory.rstrip("/") + "/")


def _at_or_above(path: str, real: str, top: str, top_real: str) -> bool:
    """Whether `path` (resolving to `real`), other than the tree's top, is the tree or holds
    it (`top`, `top_real`: ""), which `revisited` refuses: a walk goes no further there."""
    return bool(top_real) and path != top and (real == top_real or _holds(real, top_real))


def _of_another_split(path: str, real: str, foreign: Sequence[str]) -> Unlisted | None:
    """The refusal of a link into another split's folder (its images are that split's; a
    train/n09999999 linked to val/n01443537 wrote them into both, under two classes)."""
    for other in foreign:
        if real == other or is_below(real, [other]):
            return Unlisted(
                path,
                "directory_visited_twice",
                f"resolves to {real}, in {other}, another split's folder (a link to it): its "
                "files are that split's, not listed again",
            )
    return None


def _walk(
    path: str, visited: set[str], root: tuple[str, str], foreign: Sequence[str]
) -> Iterator[Listed | Unlisted]:
    real = os.path.realpath(path)
    refused = _aliased(path, real, root) or _of_another_split(path, real, foreign)
    if refused is not None or real in visited:
        yield refused or _visited_twice(path, real)
        return
    visited.add(real)
    yield from _scan(path, lambda child: _walk(child, visited, root, foreign))


def _walk_entered(
    path: str, ancestors: set[str], root: tuple[str, str]
) -> Iterator[Listed | Unlisted | Entered]:
    """A part's walk: it enters a directory again unless that would loop (it resolves to one
    of its own ancestors) or it is the tree or holds it (`root`: the tree's path and real path;
    a link to `/` walked the whole disk), which `revisited` refuses; so the parts together
    report every directory that `revisited` may find the single walk entering. (A second
    link to a directory is thus walked again by its part, and dropped later: more work only
    in trees that link one folder many times.)"""
    real = os.path.realpath(path)
    yield Entered(path, real)
    top, top_real = root
    if real in ancestors or _at_or_above(path, real, top, top_real):
        return
    ancestors.add(real)
    yield from _scan(path, lambda child: _walk_entered(child, ancestors, root))
    ancestors.discard(real)


def list_directory(
    directory: str, root: str = ""
) -> Iterator[Listed | Unlisted | Entered | Subdirectory]:
    """One directory of a local tree: Entered, then its files and its Subdirectory entries in
    name order, and what it cannot read (an unreadable directory: Entered, then Unlisted). A
    subdirectory that is the tree (`root`) or holds it, a link, is Entered, not a Subdirectory
    to list next (`revisited` refuses it; a link to `/` made every folder of the disk a part)."""
    if not os.path.isdir(directory):
        return
    directory = directory.rstrip("/")
    yield Entered(directory, os.path.realpath(directory))
    top = root.rstrip("/")
    top_real = os.path.realpath(top) if top else ""

    def child(path: str) -> Iterator[Entered | Subdirectory]:
        real = os.path.realpath(path) if top_real else ""
        if _at_or_above(path, real, top, top_real):
            return iter((Entered(path, real),))
        return iter((Subdirectory(path),))

    yield from _scan(directory, child)


def walk_subtree(directory: str, root: str = "") -> Iterator[Listed | Unlisted | Entered]:
    """Everything below one directory of a local tree (`root`: the tree's top directory), with
    an Entered for each directory it enters (`revisited` reports the directories entered
    twice)."""
    if os.path.isdir(directory):
        top = root.rstrip("/")
        yield from _walk_entered(
            directory.rstrip("/"), set(), (top, os.path.realpath(top) if top else "")
        )


def revisited(
    entered: Iterable[Entered], root: str | None = None, foreign: Sequence[str] = ()
) -> list[Unlisted]:
    """The directories that a single walk of the tree would not enter: links to a directory
    of the tree (listed by its own path) or into a `foreign` one (another split's folder),
    those resolving to a directory it entered before, in walk order (depth first, by name),
    and not below one of these. `entered`: every directory that the parts of one tree
    entered, in any order; `root`: the tree's top directory."""
    items = sorted(entered, key=lambda item: item.path.split("/"))
    top = root.rstrip("/") if root is not None else None
    top_real = next((item.real for item in items if item.path == top), None)
    seen: set[str] = set()
    refused: list[Unlisted] = []
    skipped_below: list[str] = []
    for item in items:
        if is_below(item.path, skipped_below):
            continue
        aliased = _aliased(
            item.path, item.real, (top, top_real) if top is not None and top_real else None
        ) or _of_another_split(item.path, item.real, foreign)
        if aliased is not None or item.real in seen:
            refused.append(aliased or _visited_twice(item.path, item.real))
            skipped_below.append(item.path)
        else:
            seen.add(item.real)
    return refused


def same_folder(first: str, second: str) -> bool:
    """Whether two local paths lead to one folder however they are reached (links, a bind
    mount): by device and inode, confirmed by the names inside against file systems (some
    FUSE ones) whose inode numbers clash between folders or are 0."""
    try:
        a, b = os.stat(first), os.stat(second)
        return (
            a.st_ino != 0
            and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
            and sorted(os.listdir(first)) == sorted(os.listdir(second))
        )
    except OSError:
        return False


def is_below(path: str, directories: Iterable[str]) -> bool:
    """Whether `path` lies below one of `directories`."""
    return any(path.startswith(directory + "/") for directory in directories)


def _broken_link(path: str) -> str:
    """What is wrong with a link whose target cannot be reached: it is gone, or the links
    lead back to one another (ELOOP)."""
    target = os.readlink(path)
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"links to {target!r}, and the links from there lead back to it (a loop)"
    return f"links to {target!r}, which does not exist"


def _scan(path: str, subdirectory) -> Iterator:
    """The entries of directory `path` in name order; `subdirectory(child path)` gives what
    a subdirectory yields."""
    try:
        entries = sorted(os.scandir(path), key=lambda entry: entry.name)
    except OSError as error:
        yield Unlisted(path, "unreadable_directory", f"{type(error).__name__}: {error.strerror}")
        return
    for entry in entries:
        try:
            if entry.is_dir() and is_skipped_folder(entry.name):
                yield _skipped(entry.path)
            elif entry.is_dir():
                if entry.name.lower().endswith(".xml"):  # (its image: background without it)
                    yield Unlisted(entry.path, "not_a_regular_file", "a directory, not an XML file")
                yield from subdirectory(entry.path)
            elif entry.is_file():
                stat = entry.stat()
                yield Listed(entry.path, stat.st_size, file_version(stat))
            elif entry.is_symlink() and not os.path.exists(entry.path):
                yield Unlisted(entry.path, "broken_symlink", _broken_link(entry.path))
            elif entry.is_symlink():  # (to /dev/urandom, say: "which does not exist" before)
                yield Unlisted(
                    entry.path,
                    "not_a_regular_file",
                    f"links to {os.readlink(entry.path)!r}, a device, socket or pipe",
                )
            else:
                yield Unlisted(entry.path, "not_a_regular_file", "a device, socket or pipe")
        except OSError as error:
            if error.errno == errno.ELOOP:
                yield Unlisted(entry.path, "broken_symlink", _broken_link(entry.path))
                continue
            yield Unlisted(
                entry.path, "unreadable_file", f"{type(error).__name__}: {error.strerror}"
            )
