"""Paths of local files and object-store URLs (`gs://...`), joined alike by builder and loader."""

from __future__ import annotations


def join(base: str, *parts: str) -> str:
    """Joins with '/', for local paths and `gs://` URLs alike; empty parts are skipped."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def is_local(path: str) -> bool:
    """Whether `path` is on the local file system (no `scheme://`)."""
    return "://" not in path
