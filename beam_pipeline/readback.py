"""Reading a committed build back, light: no Beam import for local paths (`show`, `inspect`).

Beam's FileSystems is imported only for remote paths (gs://): importing it costs over a second,
which a command that reads one shard has no use for.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from schemas import DATASET_INFO_FILE, DatasetInfo
from schemas.example_proto import Example
from schemas.paths import is_local, join

UNLABELLED_NAME = "unlabelled"  # what `show` and `inspect` call label -1

# Leading bytes of the image formats a tree may hold, with Pillow's names.
MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


def sniff_format(data: bytes) -> str | None:
    """The image format named by the file's leading bytes (Pillow's name), or None."""
    for magic, name in MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def open_file(path: str) -> BinaryIO:
    """A binary stream of a local or remote file."""
    if is_local(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


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


def first_value(values: dict[str, list[Any]], key: str, default: Any) -> Any:
    """The first value of a feature in `example_values`' dict, or `default` when it has none."""
    return values[key][0] if values.get(key) else default


class NoBuildError(FileNotFoundError):
    """A directory without a committed build (no metadata file)."""


def read_build_info(output_dir: str) -> DatasetInfo:
    """A committed build's metadata.

    Raises:
      NoBuildError: the metadata file is missing (the message says how to make it).
      ValueError, KeyError, TypeError: the file is not this project's metadata.
    """
    path = join(output_dir, DATASET_INFO_FILE)
    if not file_exists(path):
        raise NoBuildError(
            f"{output_dir} holds no committed build ({DATASET_INFO_FILE} is missing); build it "
            f"first (python -m beam_pipeline --input_dir TREE --output_dir {output_dir}) or let a "
            f"running build finish"
        )
    with open_file(path) as stream:
        return DatasetInfo.from_json(stream.read().decode("utf-8"))
