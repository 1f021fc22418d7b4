"""Paths of local files and object-store URLs (`gs://...`), joined alike by builder and loader."""

from __future__ import annotations

import os
from collections.abc import Sequence


def join(base: str, *parts: str) -> str:
    """Joins with '/', for local paths and `gs://` URLs alike; empty parts are skipped."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def is_local(path: str) -> bool:
    """Whether `path` is on the local file system (no `scheme://`)."""
    return "://" not in path


def not_a_directory(path: str) -> str | None:
    """ "is a file" or "does not exist" for a local path that is no directory; else None (a
    directory, or a URL, which only a listing can tell)."""
    if not is_local(path) or os.path.isdir(path):
        return None
    return "is a file" if os.path.exists(path) else "does not exist"


def first_few(names: Sequence[str], shown: int) -> str:
    """`a, b, c and 2 more`: the first `shown` of `names`, for a message."""
    rest = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {rest} more" if rest > 0 else "")


def within(path: str, directory: str) -> bool:
    """Whether the local `path` is `directory` or lies below it (`~` expanded, links
    resolved); False for URLs and empty names."""
    if not (path and directory and is_local(path) and is_local(directory)):
        return False
    path, directory = (os.path.realpath(os.path.expanduser(p)) for p in (path, directory))
    return os.path.commonpath([path, directory]) == directory


def file_system_error(error: Exception) -> str:
    """What went wrong under an error that wraps one per path (Beam's `BeamIOError`, with its
    `exception_details`), without the wrapping."""
    details = getattr(error, "exception_details", None) or {}
    causes = {f"{type(cause).__name__}: {cause}" for cause in details.values()}
    return "; ".join(sorted(causes)) or str(error)
