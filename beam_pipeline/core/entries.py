"""Element types passed between pipeline steps. None of them holds pixels.

Paths are relative to the input root (the DoFns that read files join them with it): the index is
what a runner buffers and shuffles, so it carries nothing that can be derived.
"""

from __future__ import annotations

import dataclasses

from beam_pipeline.core.annotations import Annotation
from schemas import ShardInfo


@dataclasses.dataclass(frozen=True)
class FileRef:
    """One listed file.

    Attributes:
      relative_path: path relative to the input root.
      key: pairing key: the path below the image (or annotation) directory without extension,
        prefixed with the split or VOC year so it is unique across the tree.
      split: the output split the file's directory belongs to, or "" when a split list decides.
      num_bytes: file size from the listing.
      folder_class: class named by the file's synset folder (ILSVRC CLS-LOC train), or None.
      file_version: what tells that the file changed (0: not known), from the listing: of a
        local file, its inode (another file at the path: a link pointed elsewhere, folders
        swapped by renames, none of which sets a file's time) and status change time (ctime:
        set by every write, replacement, `chmod` or `chown`, and by no user: a `cp -p` or
        `touch -r` that puts an old modification time back sets it) as one number
        (`listing.file_version`); an object's update time in nanoseconds. Output bytes never
        depend on it; `--resume` does not keep a shard of a file changed since.
    """

    relative_path: str
    key: str
    split: str
    num_bytes: int
    folder_class: str | None = None
    file_version: int = 0


@dataclasses.dataclass(frozen=True)
class IndexEntry:
    """One discovered image and its annotation file, if any (both relative to the input root)."""

    split: str
    key: str
    filename: str
    annotation_filename: str | None
    folder_class: str | None
    num_bytes: int
    file_version: int = 0  # the image's (`FileRef.file_version`)


@dataclasses.dataclass(frozen=True)
class ParsedEntry:
    """An entry with its parsed annotation (None when the image has no XML)."""

    entry: IndexEntry
    annotation: Annotation | None


@dataclasses.dataclass(frozen=True)
class LabelledEntry:
    """An entry with its image label and the label of each annotated object.

    Attributes:
      label: the image's label; -1 (`schemas.UNLABELLED`) in a split without annotations.
      source: where the label came from, one of `schemas.LABEL_SOURCES`.
      folder_disagrees: the XML's main object names another class than the image's folder.
    """

    entry: IndexEntry
    annotation: Annotation | None
    label: int
    object_labels: tuple[int, ...]
    source: str
    folder_disagrees: bool = False


@dataclasses.dataclass(frozen=True)
class ShardResult:
    """What a shard writer reports once its file is in place.

    Attributes:
      split, index, num_shards: which shard of which split.
      shard: the file as recorded in build_info.json (name, examples, bytes, SHA-256).
      class_counts: (label, examples) pairs, sorted by label; unlabelled examples in none.
      label_sources: (label source, examples) pairs, sorted.
      folder_disagreements: examples whose XML and folder name different classes.
      objects, widths, heights: (value, examples) pairs, sorted: examples by number of
        annotated objects, by stored width and by stored height.
    """

    split: str
    index: int
    num_shards: int
    shard: ShardInfo
    class_counts: tuple[tuple[int, int], ...]
    label_sources: tuple[tuple[str, int], ...] = ()
    folder_disagreements: int = 0
    objects: tuple[tuple[int, int], ...] = ()
    widths: tuple[tuple[int, int], ...] = ()
    heights: tuple[tuple[int, int], ...] = ()
