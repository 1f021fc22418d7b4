"""Re-read a committed build and check every byte of it against its metadata.

    python -m beam_pipeline.verify OUT [--workers 2] [--no_decode]

For every shard in the build's metadata (`build_info.json`): the file exists; each record's
framing and CRC32C are valid; each record is an Example with every schema key, of the right
kind and length, whose one-hot agrees with its label and whose boxes lie in [0, 1]; each image
fully decodes as RGB at its recorded size; and the record count, byte count and SHA-256 match
the metadata. The first problem of each shard is reported with the shard and record index.
TFDS's metadata beside the shards (`dataset_info.json`, `features.json`, the `.labels.txt`
files) must say what `build_info.json` says (a build of schema 1.x has none: `upgrade` writes
it). Exit code 0 when everything checks, 1 when something does not, 2 when OUT holds no
committed build.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import io
import json
import os
import sys
from collections.abc import Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from PIL import Image

from beam_pipeline.console import plural
from beam_pipeline.readback import read_build_info
from beam_pipeline.tfrecord import CorruptRecordError, read_records
from schemas import (
    BUILD_INFO_FILE,
    FEATURES,
    SCHEMA_VERSION,
    UNLABELLED,
    DatasetInfo,
    ShardInfo,
)
from schemas import features as F
from schemas.example_proto import Example
from schemas.paths import join
from schemas.tfds_metadata import tfds_files

_OBJECT_KEYS = [f.key for f in FEATURES if f.length is None]


@dataclasses.dataclass(frozen=True)
class Problem:
    """The first thing wrong with one shard; `record` is None for whole-file problems."""

    file: str
    record: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.record is None else f"{self.file} record {self.record}"
        return f"{where}: {self.message}"


class _HashingReader:
    """A read-only stream that hashes and counts what passes through it."""

    def __init__(self, stream):
        self._stream = stream
        self.digest = hashlib.sha256()
        self.num_bytes = 0

    def read(self, size: int) -> bytes:
        data = self._stream.read(size)
        self.digest.update(data)
        self.num_bytes += len(data)
        return data


def check_example(
    record: bytes,
    num_classes: int,
    decode: bool = True,
    labelled: bool = True,
    schema_version: str = SCHEMA_VERSION,
) -> str | None:
    """What is wrong with one serialised Example (of a labelled split or not), or None.

    Keys newer than the build's `schema_version` are not required.
    """
    try:
        example = Example.FromString(record)
    except Exception as error:  # noqa: BLE001 - protobuf raises its own DecodeError
        return f"not a tf.train.Example ({type(error).__name__})"
    features = example.features.feature
    values = {}
    for spec in FEATURES:
        if not spec.in_schema(schema_version):
            continue
        if spec.key not in features:
            return f"missing feature {spec.key}"
        kind = features[spec.key].WhichOneof("kind")
        if kind != spec.proto_kind:
            return f"{spec.key} is {kind}, expected {spec.proto_kind}"
        values[spec.key] = list(getattr(features[spec.key], kind).value)
        length = spec.num_values(num_classes)
        if length is not None and len(values[spec.key]) != length:
            return f"{spec.key} has {len(values[spec.key])} values, expected {length}"
    label = values[F.LABEL][0]
    one_hot = values[F.ONE_HOT]
    if not labelled:
        if label != UNLABELLED or any(one_hot):
            return f"label {label} in an unlabelled split (expected {UNLABELLED}, one-hot all 0)"
    elif not 0 <= label <= num_classes:
        return f"label {label} outside [0, {num_classes}]"
    elif sum(one_hot) != 1 or one_hot[label] != 1:
        return f"one-hot does not encode label {label}"
    lengths = {len(values[key]) for key in _OBJECT_KEYS}
    if len(lengths) != 1:
        return "per-object lists have different lengths"
    boxes = zip(
        *(values[k] for k in (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)), strict=True
    )
    for i, (xmin, ymin, xmax, ymax) in enumerate(boxes):
        if not (0.0 <= xmin <= xmax <= 1.0 and 0.0 <= ymin <= ymax <= 1.0):
            return f"object {i} box {(xmin, ymin, xmax, ymax)} is not inside [0, 1]"
    if any(not 0 <= c < num_classes for c in values[F.OBJECT_LABEL]):
        return "an object label is outside the vocabulary"
    if values[F.FORMAT] != [F.IMAGE_FORMAT.encode()] or values[F.CHANNELS] != [F.IMAGE_CHANNELS]:
        return f"format {values[F.FORMAT]} / channels {values[F.CHANNELS]} is not 3-channel JPEG"
    if decode:
        problem = _check_image(values[F.ENCODED][0], values[F.WIDTH][0], values[F.HEIGHT][0])
        if problem:
            return problem
    if F.KEY_SHA256 in values:
        digest = hashlib.sha256(values[F.ENCODED][0]).hexdigest().encode("ascii")
        if values[F.KEY_SHA256] != [digest]:
            return f"{F.KEY_SHA256} is not the SHA-256 of the image bytes"
    return None


def _check_image(data: bytes, width: int, height: int) -> str | None:
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as image:
            image.load()
            size, mode = image.size, image.mode
    except Exception as error:  # noqa: BLE001 - any decoder failure means the image is bad
        return f"image does not decode ({type(error).__name__}: {error})"
    if mode != "RGB":
        return f"image is {mode}, not RGB"
    if size != (width, height):
        return f"image is {size[0]}x{size[1]}, the record says {width}x{height}"
    return None


def verify_shard(
    data_dir: str,
    shard: ShardInfo,
    num_classes: int,
    decode: bool = True,
    labelled: bool = True,
    schema_version: str = SCHEMA_VERSION,
) -> Problem | None:
    """Checks one shard; returns its first problem or None."""
    path = join(data_dir, shard.file)
    if not FileSystems.exists(path):
        return Problem(shard.file, None, "missing")
    count = 0
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        reader = _HashingReader(stream)
        try:
            for count, record in enumerate(read_records(reader), start=1):
                problem = check_example(record, num_classes, decode, labelled, schema_version)
                if problem:
                    return Problem(shard.file, count - 1, problem)
        except CorruptRecordError as error:
            return Problem(shard.file, error.index, f"{error.problem} (byte {error.offset})")
    if count != shard.num_examples:
        return Problem(
            shard.file, None, f"{count} records, the build's metadata says {shard.num_examples}"
        )
    if reader.num_bytes != shard.num_bytes:
        return Problem(shard.file, None, f"{reader.num_bytes} bytes, expected {shard.num_bytes}")
    if reader.digest.hexdigest() != shard.sha256:
        return Problem(shard.file, None, "SHA-256 differs from the build's metadata")
    return None


def verify(data_dir: str, workers: int = 1, decode: bool = True) -> tuple[int, list[Problem]]:
    """Checks every shard of every split; returns (shards checked, problems in shard order)."""
    info = read_build_info(data_dir)
    shards = [
        (shard, split.labelled)
        for _, split in sorted(info.splits.items())
        for shard in split.shards
    ]
    args = [
        (data_dir, shard, info.num_classes, decode, labelled, info.schema_version)
        for shard, labelled in shards
    ]
    if workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(verify_shard, *zip(*args, strict=True)))
    else:
        results = [verify_shard(*a) for a in args]
    problems = [problem for problem in results if problem is not None]
    if FileSystems.exists(join(data_dir, BUILD_INFO_FILE)):
        problems += check_tfds_metadata(data_dir, info)
    return len(shards), problems


def check_tfds_metadata(data_dir: str, info: DatasetInfo) -> list[Problem]:
    """Problems with TFDS's files beside the shards: missing, or not what `info` says."""
    fix = f"python -m beam_pipeline upgrade {data_dir} rewrites it"
    problems = []
    for name, expected in tfds_files(info).items():
        path = join(data_dir, name)
        if not FileSystems.exists(path):
            problems.append(Problem(name, None, f"missing, so TFDS cannot read the build; {fix}"))
            continue
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            found = stream.read().decode("utf-8", errors="replace")
        if _tfds_content(name, found) != _tfds_content(name, expected):
            problems.append(Problem(name, None, f"disagrees with {BUILD_INFO_FILE}; {fix}"))
    return problems


def _tfds_content(name: str, text: str) -> object:
    if not name.endswith(".json"):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline verify", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("data_dir")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no_decode", action="store_true", help="Skip decoding the images.")
    args = parser.parse_args(argv)
    try:
        num_shards, problems = verify(args.data_dir, args.workers, not args.no_decode)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        print(f"{len(problems)} of {num_shards} shards have problems")
        return 1
    print(f"OK: {plural(num_shards, 'shard')} verified")
    if not FileSystems.exists(join(args.data_dir, BUILD_INFO_FILE)):
        print(
            f"note: a build of schema 1.x, whose metadata TFDS cannot read; "
            f"python -m beam_pipeline upgrade {args.data_dir} adds TFDS's files (shards untouched)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
