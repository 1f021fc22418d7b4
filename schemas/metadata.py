"""`build_info.json`: the metadata that describes (and commits) one build.

The builder writes this file last; its presence is what marks an output directory as complete.
The loader reads the file list, counts and classes from it and never globs for shards.
Builds before schema 2.0 kept the same metadata under TFDS's file name, `dataset_info.json`,
which now holds TFDS's own metadata (`schemas.tfds_metadata`); `read_build_info` reads both.
Pure Python (json + dataclasses) so both halves and the tests share it without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from schemas.classes import ClassList, is_labelled
from schemas.features import SCHEMA_VERSION
from schemas.paths import join
from schemas.payload_checks import PayloadError, check_payload

BUILD_INFO_FILE = "build_info.json"
# Where builds of schema 1.x kept their metadata (now TFDS's dataset_info.json, see above).
LEGACY_INFO_FILE = "dataset_info.json"
# Schema major versions whose metadata this code reads (1.x: the legacy file, same fields).
READABLE_MAJORS = ("1", "2")
LABELS_FILE = "labels.txt"
DEAD_LETTER_FILE = "rejected.jsonl"
# The copies among a build's images, a JSON line per group (`core.quality.duplicates`).
DUPLICATES_FILE = "duplicates.jsonl"
# Odd images (nearly uniform, tiny, extreme aspect ratio, grey among colour), a JSON line each.
ODD_IMAGES_FILE = "odd_images.jsonl"
SHARD_SUFFIX = ".tfrecord"


def shard_filename(split: str, index: int, num_shards: int) -> str:
    """File name of shard `index` of `num_shards`, e.g. `train-00003-of-00016.tfrecord`."""
    return f"{split}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}"


def is_shard_filename(name: str) -> bool:
    """Whether `name` has the form `shard_filename` produces."""
    return re.fullmatch(r"[^/]+-\d{5}-of-\d{5}" + re.escape(SHARD_SUFFIX), name) is not None


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One written shard file."""

    file: str
    num_examples: int
    num_bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split: what was found, what was written and where.

    `num_discovered == num_examples + num_rejected` always holds for a committed build.
    `class_counts[i]` counts examples whose label is class `i` (the last entry is background;
    unlabelled examples are in none). `label_sources` counts examples by where their label came
    from (`schemas.classes.LABEL_SOURCES`; builds before schema 1.1 recorded none), and
    `folder_disagreements` the examples whose XML names another class than their folder.
    `objects_per_image`, `image_widths` and `image_heights` count the written examples by their
    number of annotated objects and by their stored width and height in pixels (builds before
    schema 1.2 recorded none: empty).
    """

    num_examples: int
    num_discovered: int
    num_rejected: int
    class_counts: tuple[int, ...]
    shards: tuple[ShardInfo, ...]
    label_sources: dict[str, int] = dataclasses.field(default_factory=dict)
    folder_disagreements: int = 0
    objects_per_image: dict[int, int] = dataclasses.field(default_factory=dict)
    image_widths: dict[int, int] = dataclasses.field(default_factory=dict)
    image_heights: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def labelled(self) -> bool:
        """False for a split without annotations, whose examples all carry label -1."""
        return is_labelled(self.num_examples, self.label_sources)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Everything a reader needs to know about a build."""

    schema_version: str
    classes: tuple[str, ...]
    splits: dict[str, SplitInfo]
    failures: dict[str, int]
    options: dict[str, Any]
    source: dict[str, Any]
    versions: dict[str, str]
    display_names: dict[str, str] = dataclasses.field(default_factory=dict)
    # Copies among the stored images (`duplicates.jsonl` lists them): exact_groups, near_pairs,
    # images in any, leaked (per split: its images that copy a training image), clashes
    # (groups of several classes), dropped (per split: copies of training images left out by
    # --duplicates drop_leaks, when any). Empty for builds that did not look for them.
    duplicates: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Odd images per reason (`odd_images.jsonl` lists them), where the build looked for copies.
    odd_images: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def class_list(self) -> ClassList:
        """The classes with the background class after them."""
        return ClassList(self.classes)

    @property
    def num_classes(self) -> int:
        """Number of real classes, background excluded."""
        return self.class_list.num_classes

    @property
    def background_index(self) -> int:
        """Index of the background class: the last one."""
        return self.class_list.background_index

    @property
    def shard_files(self) -> frozenset[str]:
        """The file names of every split's shards."""
        return frozenset(shard.file for split in self.splits.values() for shard in split.shards)

    @property
    def has_background(self) -> bool:
        """Whether any split holds an image labelled background (an image without objects;
        a build of class folders has none)."""
        return any(sum(s.class_counts[self.background_index :]) for s in self.splits.values())

    def to_json(self) -> str:
        payload = {
            "schema_version": self.schema_version,
            "classes": list(self.classes),
            "display_names": dict(self.display_names),
            "num_classes": self.num_classes,
            "background_index": self.background_index,
            "splits": {
                name: {
                    "num_examples": split.num_examples,
                    "num_discovered": split.num_discovered,
                    "num_rejected": split.num_rejected,
                    "num_shards": split.num_shards,
                    "labelled": split.labelled,
                    "label_sources": dict(sorted(split.label_sources.items())),
                    "folder_disagreements": split.folder_disagreements,
                    "class_counts": list(split.class_counts),
                    "objects_per_image": _histogram_json(split.objects_per_image),
                    "image_widths": _histogram_json(split.image_widths),
                    "image_heights": _histogram_json(split.image_heights),
                    "shards": [dataclasses.asdict(shard) for shard in split.shards],
                }
                for name, split in sorted(self.splits.items())
            },
            "failures": dict(sorted(self.failures.items())),
            **({"duplicates": self.duplicates} if self.duplicates else {}),
            **({"odd_images": self.odd_images} if self.odd_images else {}),
            "options": self.options,
            "source": self.source,
            "versions": self.versions,
        }
        return json.dumps(payload, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DatasetInfo:
        """Parses `build_info.json` (or a schema 1.x build's `dataset_info.json`).

        Raises:
          ValueError: another schema major version (a newer build: update this code).
        """
        return cls.from_payload(json.loads(text))

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> DatasetInfo:
        """`from_json` of the already parsed JSON."""
        version = readable_version(payload)
        splits = {
            name: SplitInfo(
                num_examples=split["num_examples"],
                num_discovered=split["num_discovered"],
                num_rejected=split["num_rejected"],
                class_counts=tuple(split["class_counts"]),
                shards=tuple(ShardInfo(**shard) for shard in split["shards"]),
                label_sources=dict(split.get("label_sources", {})),
                folder_disagreements=split.get("folder_disagreements", 0),
                objects_per_image=_histogram(split.get("objects_per_image", {})),
                image_widths=_histogram(split.get("image_widths", {})),
                image_heights=_histogram(split.get("image_heights", {})),
            )
            for name, split in payload["splits"].items()
        }
        return cls(
            schema_version=version,
            classes=tuple(payload["classes"]),
            splits=splits,
            failures=dict(payload["failures"]),
            options=dict(payload["options"]),
            source=dict(payload["source"]),
            versions=dict(payload["versions"]),
            display_names=dict(payload.get("display_names", {})),
            duplicates=dict(payload.get("duplicates", {})),
            odd_images=dict(payload.get("odd_images", {})),
        )


def readable_version(payload: dict[str, Any]) -> str:
    """The schema version of a build's parsed metadata; ValueError for another major version
    (a newer build: update this code)."""
    version = str(payload.get("schema_version", ""))
    if version.split(".")[0] not in READABLE_MAJORS:
        raise ValueError(
            f"the build's metadata has schema version {version!r}; this code (schema "
            f"{SCHEMA_VERSION}) reads versions {', '.join(m + '.x' for m in READABLE_MAJORS)}"
            "; update imagenet-tfrecords to read it"
        )
    return version


class NoBuildError(FileNotFoundError):
    """A directory without a committed build (no build metadata)."""


class DamagedBuildError(ValueError):
    """A build whose `build_info.json` is there but cannot be read: no file, not JSON, or a
    field of the schema missing, of the wrong kind or value (`schemas.payload_checks`)."""


def disagreements(info: DatasetInfo) -> list[str]:
    """The metadata's own sums, where they disagree: each split lists shards 0..n-1 of n, once
    each; its shards' examples add up to its count; discovered = written + rejected; its
    class counts add up. (A shard dropped from the list, or one listed in two splits: the
    loader read what was listed, silently, until these were checked on every read.)"""
    found = []
    for split_name, split in sorted(info.splits.items()):
        n = len(split.shards)
        expected = [shard_filename(split_name, i, n) for i in range(n)]
        listed = [shard.file for shard in split.shards]
        messages = []
        if listed != expected:
            missing = sorted(set(expected) - set(listed))
            messages.append(
                f"lists {n} shards but not as {split_name}-00000-of-{n:05d} to "
                f"-{n - 1:05d} (missing {missing[:3]}, listed {listed[:3]}...)"
                if missing
                else f"lists its {n} shards out of order or twice"
            )
        written = sum(shard.num_examples for shard in split.shards)
        if written != split.num_examples:
            messages.append(
                f"its shards hold {written} examples, num_examples says {split.num_examples}"
            )
        if split.num_discovered != split.num_examples + split.num_rejected:
            messages.append(
                f"num_discovered {split.num_discovered} != num_examples {split.num_examples} + "
                f"num_rejected {split.num_rejected}"
            )
        counted = sum(split.class_counts)
        if split.labelled and split.class_counts and counted != split.num_examples:
            messages.append(
                f"class_counts add up to {counted}, num_examples is {split.num_examples}"
            )
        found += [f"split {split_name!r}: {message}" for message in messages]
    return found


def read_build_info(
    read_text: Callable[[str], str | None], output_dir: str, sums: bool = True
) -> DatasetInfo:
    """A committed build's metadata: `build_info.json`, or a schema 1.x build's file.

    Args:
      read_text: reads a file of the build directory by name; None when it does not exist
        (each side passes its own file system: Beam's, tf.io.gfile).
      output_dir: the directory, for messages.
      sums: refuse metadata whose sums disagree (`disagreements`) as damaged; `verify` (which
        lists every disagreement) and `upgrade` read it as it is.

    Raises:
      NoBuildError: no committed build there (the message says why and what to do).
      DamagedBuildError: `build_info.json` is damaged (the message names it).
      ValueError: the metadata is of a schema this code cannot read.
    """
    text = read_text(BUILD_INFO_FILE)
    if text is not None:
        path = join(output_dir, BUILD_INFO_FILE)
        return _summed(_parse_build_info(text, path), path, output_dir, sums)
    legacy = read_text(LEGACY_INFO_FILE)
    if legacy is None:
        raise NoBuildError(
            f"{output_dir} holds no committed build ({BUILD_INFO_FILE} is missing): build it "
            f"first (python -m beam_pipeline --input_dir TREE --output_dir {output_dir}; this "
            "is the output directory, not the tree), rerun an interrupted build's command "
            "(--resume keeps its shards), or let the running build finish; shards without it "
            "are never read"
        )
    payload = build_payload(legacy)
    if payload is None:
        raise NoBuildError(
            f"{output_dir} holds no committed build: {BUILD_INFO_FILE} is missing and "
            f"{LEGACY_INFO_FILE} is TFDS's metadata, not a build's (a build stopped while "
            "committing, or a directory TFDS wrote); rebuild it with --overwrite"
        )
    path = join(output_dir, LEGACY_INFO_FILE)
    return _summed(_info_of(payload, path), path, output_dir, sums)


def _summed(info: DatasetInfo, path: str, output_dir: str, sums: bool) -> DatasetInfo:
    """`info`, or DamagedBuildError naming the first of its `disagreements` where `sums`."""
    found = disagreements(info) if sums else []
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise DamagedBuildError(
            f"{_DAMAGED.format(path)} ({found[0]}{more}: python -m beam_pipeline verify "
            f"{output_dir} lists them); {_REBUILD}"
        )
    return info


def build_payload(text: str | bytes) -> dict[str, Any] | None:
    """The parsed metadata of a build (JSON with a `schema_version`), or None for other text
    (TFDS's `dataset_info.json`, not JSON)."""
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) and "schema_version" in payload else None


_DAMAGED = "{} is damaged and the build cannot be read"
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_REBUILD = "rebuild it (--overwrite replaces it)"
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")  # as every build wrote it: MAJOR.MINOR.PATCH


def metadata_text(data: bytes, path: str) -> str:
    """A metadata file's text; DamagedBuildError, naming it, for bytes that are not UTF-8 (a
    PNG written over it, say)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DamagedBuildError(
            f"{_DAMAGED.format(path)} (not UTF-8 text: {error}); {_REBUILD}"
        ) from None


def _parse_build_info(text: str, path: str) -> DatasetInfo:
    try:
        payload = json.loads(text)
    except ValueError as error:
        raise DamagedBuildError(
            f"{_DAMAGED.format(path)} (not JSON: {error}); {_REBUILD}"
        ) from None
    except RecursionError:  # (arrays within arrays, thousands deep)
        raise DamagedBuildError(
            f"{_DAMAGED.format(path)} (not a build's JSON: nested too deep); {_REBUILD}"
        ) from None
    if _SURROGATE.search(text):  # a "\ud800" escape: a string no UTF-8 file or name can hold
        try:
            json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise DamagedBuildError(
                f"{_DAMAGED.format(path)} (a string holds a lone surrogate, not text); {_REBUILD}"
            ) from None
    if not isinstance(payload, dict) or "schema_version" not in payload:
        raise DamagedBuildError(f"{_DAMAGED.format(path)} (it has no schema_version); {_REBUILD}")
    return _info_of(payload, path)


def unreadable_metadata(path: str, why: str) -> DamagedBuildError:
    """The error for a metadata file that is there but cannot be read (a directory of its
    name, say), naming it and `why` (the file system's words)."""
    return DamagedBuildError(f"{_DAMAGED.format(path)} (reading it fails: {why}); {_REBUILD}")


def _info_of(payload: dict[str, Any], path: str) -> DatasetInfo:
    """`DatasetInfo.from_payload`; DamagedBuildError, naming `path` and the field, for a field
    of the schema missing, of the wrong kind or disagreeing with another (`check_payload`)."""
    version = payload["schema_version"]
    if isinstance(version, str) and not _VERSION.fullmatch(version):  # (another kind: below)
        raise DamagedBuildError(
            f"{_DAMAGED.format(path)} (schema_version is {version!r}, not a version such as "
            f"{SCHEMA_VERSION!r}); {_REBUILD}"
        )
    readable_version(payload)  # (another schema's metadata is no damage: its own ValueError)
    try:
        check_payload(payload)
        return DatasetInfo.from_payload(payload)
    except (PayloadError, KeyError, TypeError, AttributeError) as error:
        what = f"no {error}" if isinstance(error, KeyError) else str(error)
        raise DamagedBuildError(f"{_DAMAGED.format(path)} ({what}); {_REBUILD}") from None


def histogram_median(histogram: Mapping[int, int]) -> float:
    """The median of values given as {value: count} (a split's `image_widths`, say): the mean
    of the two middle ones of an even count, as `stats` prints it."""
    total = sum(histogram.values())
    ordered = sorted(histogram.items())

    def nth(n):
        seen = 0
        for value, count in ordered:
            seen += count
            if seen > n:
                return value
        raise IndexError(n)

    return (nth((total - 1) // 2) + nth(total // 2)) / 2


def _histogram_json(counts: dict[int, int]) -> dict[str, int]:
    """{value: count} with JSON's string keys, in value order."""
    return {str(value): count for value, count in sorted(counts.items())}


def _histogram(counts: dict[str, int]) -> dict[int, int]:
    return {int(value): count for value, count in counts.items()}
