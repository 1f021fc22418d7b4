"""Reading a committed build back, light: no Beam import for local paths (`show`, `inspect`).

Beam's FileSystems is imported only for remote paths (gs://): importing it costs over a second,
which a command that reads one shard has no use for.
"""

from __future__ import annotations

import collections
import os
from typing import Any, BinaryIO

from schemas import BUILD_INFO_FILE, FEATURES, SCHEMA_VERSION, DatasetInfo
from schemas import NoBuildError as NoBuildError  # re-exported: what read_build_info raises
from schemas import features as F
from schemas import read_build_info as read_metadata
from schemas.example_proto import Example
from schemas.features import is_later_minor
from schemas.metadata import metadata_text, unreadable_metadata
from schemas.paths import file_system_error, is_local, join, not_a_directory
from schemas.trees import tree_instead_of_build

UNLABELLED_NAME = "unlabelled"  # what `show` and `inspect` call label -1


def open_file(path: str) -> BinaryIO:
    """A binary stream of a local or remote file."""
    if is_local(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def file_size(path: str) -> int:
    """The size of a local or remote file in bytes (FileNotFoundError, naming it, without one)."""
    if is_local(path):
        return os.stat(path).st_size
    from apache_beam.io.filesystems import FileSystems

    (found,) = FileSystems.match([path])
    if not found.metadata_list:
        raise FileNotFoundError(2, "no such file", path)
    return found.metadata_list[0].size_in_bytes


def file_exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def example_values(record: bytes) -> dict[str, list[Any]]:
    """A serialized Example as {feature key: list of values}."""
    return feature_values(Example.FromString(record))


def feature_values(example: Example) -> dict[str, list[Any]]:
    """An Example's features as {feature key: list of values}."""
    values = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values[key] = list(getattr(feature, kind).value) if kind else []
    return values


_PYTHON_KINDS = {"bytes_list": bytes, "float_list": float, "int64_list": int}
_KIND_OF = {spec.key: _PYTHON_KINDS[spec.proto_kind] for spec in FEATURES}


def typed_values(values: dict[str, list[Any]]) -> tuple[dict[str, list[Any]], list[str]]:
    """(`example_values`' features whose values are of the schema's kind, the schema's keys left
    out for values of another kind): what `show` and `inspect` read labels, sizes and boxes
    from, so a damaged record's label of bytes or box of integers is said, not a traceback."""
    typed, wrong = {}, []
    for key, column in values.items():
        kind = _KIND_OF.get(key)
        if kind is None or all(type(value) is kind for value in column):
            typed[key] = column
        else:
            wrong.append(key)
    return typed, wrong


def stored_filename(values: dict[str, list[Any]]) -> str:
    """The record's `image/filename` as text ("" where it has none, or one not of bytes)."""
    name = first_value(values, F.FILENAME, b"")
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else ""


def first_value(values: dict[str, list[Any]], key: str, default: Any) -> Any:
    """The first value of a feature in `example_values`' dict, or `default` when it has none."""
    return values[key][0] if values.get(key) else default


def read_build_info(output_dir: str, sums: bool = True) -> DatasetInfo:
    """A committed build's metadata (`build_info.json`, or a schema 1.x build's file); with
    `sums`, refused as damaged where its sums disagree (`schemas.metadata.disagreements`).

    Raises:
      NoBuildError: no committed build there (the message says how to make one).
      DamagedBuildError: the metadata is there but damaged (the message names the file).
      ValueError: the metadata is of a schema this code cannot read.
    """
    if what := not_a_directory(output_dir):
        raise NoBuildError(
            f"{output_dir} {what}; name the output directory of a build "
            f"(python -m beam_pipeline --input_dir TREE --output_dir OUT)"
        )

    from apache_beam.io.filesystems import BeamIOError

    def read_text(name: str) -> str | None:
        path = join(output_dir, name)
        if not file_exists(path):
            return None
        try:
            with open_file(path) as stream:
                data = stream.read()
        except (FileNotFoundError, BeamIOError):
            raise
        except OSError as error:  # a directory of its name, say: the build is damaged
            raise unreadable_metadata(path, error.strerror or str(error)) from None
        return metadata_text(data, path)

    try:
        return read_metadata(read_text, output_dir, sums)
    except NoBuildError:
        listing = os.listdir if is_local(output_dir) else None
        if tree := tree_instead_of_build(output_dir, _is_dir, listing):
            raise tree from None
        raise
    except BeamIOError as error:  # a URL Beam's file system cannot read here (s3:// unset)
        raise NoBuildError(f"{output_dir} cannot be read: {file_system_error(error)}") from None


def refuse_later_schema(output_dir: str, info: DatasetInfo, command: str) -> None:
    """ValueError for a build of a later minor schema than this code's, which `command`
    (upgrade, verify) would rewrite or judge by this schema (TFDS's files without the keys it
    added; every record's new keys unknown)."""
    if is_later_minor(info.schema_version):
        raise ValueError(
            f"{join(output_dir, BUILD_INFO_FILE)}: the build is of schema {info.schema_version}, "
            f"newer than this code's {SCHEMA_VERSION}: run {command} with the version that wrote "
            "it (pip install -U imagenet-tfrecords)"
        )


def _is_dir(path: str) -> bool:
    """Local directories only: an object store has none to tell a tree by cheaply."""
    return is_local(path) and os.path.isdir(path)


def rejections_by_split(output_dir: str) -> dict[str, dict[str, int]]:
    """Split → reason → count of every line of a committed build's `rejected.jsonl`."""
    return _by_split(_rejection_counts(output_dir), {True, False})


def rejections_and_reports(
    output_dir: str,
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """(rejected images, files only reported), each split → reason → count, from one read of
    a committed build's `rejected.jsonl`."""
    counts = _rejection_counts(output_dir)
    return _by_split(counts, {True}), _by_split(counts, {False})


def _by_split(counts: collections.Counter, kinds: set[bool]) -> dict[str, dict[str, int]]:
    grouped: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    for (is_image, split, reason), count in counts.items():
        if is_image in kinds:
            grouped[split][reason] += count
    return {split: dict(reasons) for split, reasons in grouped.items()}


def _rejection_counts(output_dir: str) -> collections.Counter:
    """(is an image, split, reason) → count of a build's `rejected.jsonl`.

    Raises:
      ValueError: the file is missing or not a build's (named, with `verify` to run).
    """
    from beam_pipeline.core.rejections import InputError, read_dead_letter
    from beam_pipeline.tree.fileio import read_file
    from schemas import DEAD_LETTER_FILE
    from schemas.paths import join

    path = join(output_dir, DEAD_LETTER_FILE)
    try:
        return collections.Counter(
            (bool(r["is_image"]), r["split"], r["reason"])
            for r in read_dead_letter(read_file(path).decode("utf-8"))
        )
    except (InputError, ValueError) as error:
        raise ValueError(
            f"{path} cannot be read ({error}), and the build counts rejections: "
            f"python -m beam_pipeline verify {output_dir} checks what else is damaged"
        ) from None
