"""Listing a directory tree, accounting for everything that is not a readable file.

Remote paths (`gs://`, ...) go through Beam's FileSystems. Local paths are walked here, because
Beam's local listing silently drops what it cannot stat (a broken symlink disappears) and never
enters a symlinked directory (a tree of linked class folders would come out empty). This walk
follows directory links, refuses to enter a directory twice (so symlink loops end), and reports
broken links, unreadable entries and special files instead of skipping them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

from apache_beam.io.filesystems import FileSystems

from schemas.paths import is_local, join


@dataclasses.dataclass(frozen=True)
class Listed:
    path: str
    num_bytes: int


@dataclasses.dataclass(frozen=True)
class Unlisted:
    """Something in the tree that is not a readable regular file."""

    path: str
    reason: str
    detail: str


def list_tree(directory: str) -> Iterator[Listed | Unlisted]:
    """Every file below `directory` in path order; nothing if the directory does not exist."""
    if not is_local(directory):
        (result,) = FileSystems.match([join(directory, "**")])
        for metadata in sorted(result.metadata_list, key=lambda m: m.path):
            yield Listed(metadata.path, metadata.size_in_bytes)
        return
    if os.path.isdir(directory):
        yield from _walk(directory.rstrip("/"), set())


def _walk(path: str, visited: set[str]) -> Iterator[Listed | Unlisted]:
    real = os.path.realpath(path)
    if real in visited:
        yield Unlisted(
            path,
            "directory_visited_twice",
            f"resolves to {real}, which was already listed (a symlink loop or a second link)",
        )
        return
    visited.add(real)
    try:
        entries = sorted(os.scandir(path), key=lambda entry: entry.name)
    except OSError as error:
        yield Unlisted(path, "unreadable_directory", f"{type(error).__name__}: {error.strerror}")
        return
    for entry in entries:
        try:
            if entry.is_dir():
                yield from _walk(entry.path, visited)
            elif entry.is_file():
                yield Listed(entry.path, entry.stat().st_size)
            elif entry.is_symlink():
                target = os.readlink(entry.path)
                yield Unlisted(
                    entry.path, "broken_symlink", f"links to {target!r}, which does not exist"
                )
            else:
                yield Unlisted(entry.path, "not_a_regular_file", "a device, socket or pipe")
        except OSError as error:
            yield Unlisted(
                entry.path, "unreadable_file", f"{type(error).__name__}: {error.strerror}"
            )
