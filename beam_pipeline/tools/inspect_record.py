"""Print one record of a shard, or the records of a build found by file name, as text (or JSON).

    python -m beam_pipeline inspect SHARD [--index K | --filename NAME] [--json]
    python -m beam_pipeline inspect OUT (--filename NAME | --split S [--index N]) [--json]

Every feature key with its value in the schema's order; the image summarised (format, bytes,
decoded size and mode, SHA-256), never printed; the label with its class name (from the build's
metadata where there is one); every object's box relative and in pixels, with its flags.
`--index` picks a record by position (negative from the end), `--filename` the one whose
`image/filename` is NAME or ends with `/NAME`; in a build's directory, across its shards
(`build_records.locate`: each with its split, shard and position; an image may be in several
splits). Exit 0 when a record is printed, 2 for bad arguments (a missing shard, an index out of
range, a name several files end with), 1 when none has the file name or a shard is corrupt.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any

from beam_pipeline.arguments import nonblank, parse_once
from beam_pipeline.output.readback import (
    NoBuildError,
    file_exists,
    open_file,
    read_build_info,
    stored_filename,
)
from beam_pipeline.tools.build_records import (
    CorruptShardError,
    RequestError,
    check_shard,
    locate,
    shard_build_info,
    shard_directory,
)
from beam_pipeline.tools.record_view import (
    describe_record,
    record_features,
    split_of_shard,
    to_json,
)
from schemas import (
    BUILD_INFO_FILE,
    FEATURES,
    SHARD_SUFFIX,
    DatasetInfo,
    is_shard_filename,
)
from schemas import features as F
from schemas.paths import is_local, join
from schemas.tfrecord import CorruptRecordError, read_records

_BOX_KEYS = (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)
_SCALARS = {f.key for f in FEATURES if f.length == 1}


class UsageError(Exception):
    """Bad arguments: exit code 2."""


class NotFoundError(LookupError):
    """No record has the file name asked for: exit code 1."""


def find_record(
    shard: str, index: int | None = None, filename: str | None = None
) -> tuple[int, bytes, int]:
    """(position, serialised Example, records read) of one record of a shard.

    By position (`index`, default 0; negative counts from the end) or by `image/filename`
    (equal to `filename` or ending with `/filename`, in either Unicode form). Raises UsageError
    for a missing shard or an index out of range, NotFoundError when no record has the name,
    CorruptRecordError.
    """
    check_shard(shard)
    count = 0
    with open_file(shard) as stream:
        records = read_records(stream)
        if filename is not None:  # (in either Unicode form: `café` typed, stored decomposed)
            wanted = unicodedata.normalize("NFC", filename)
            for count, record in enumerate(records, start=1):
                stored = stored_filename(record_features(record, shard, count - 1))
                name = unicodedata.normalize("NFC", stored)
                if name == wanted or name.endswith("/" + wanted):
                    return count - 1, record, count
            raise NotFoundError(
                f"no record of {shard} has image/filename {filename} or .../{filename} "
                f"(searched {count} records)"
            )
        index = 0 if index is None else index
        if index >= 0:
            for count, record in enumerate(records, start=1):
                if count - 1 == index:
                    return index, record, count
        else:
            last: collections.deque = collections.deque(maxlen=-index)
            for record in records:
                last.append(record)
                count += 1
            if len(last) == -index:
                return count + index, last[0], count
    span = f" (0..{count - 1}, or -{count}..-1 from the end)" if count else ""
    raise UsageError(f"--index {index} is out of range: {shard} has {count} records{span}")


def format_text(
    shard: str,
    index: int,
    info: DatasetInfo | None,
    described: dict,
    position: tuple[int, int] | None = None,
) -> list[str]:
    """The lines `inspect` prints for one described record; `position`: (its position in its
    split, the split's records), for a record found in a build."""
    split, num_records = split_of_shard(shard, info)
    of = f" of {num_records}" if num_records is not None else ""
    in_split = f" in split {split}" if split else ""
    names_from = "class names from the build" if info else "class names from the record"
    if position is not None:
        names_from = f"the split's record {position[0]} of {position[1]}; {names_from}"
    lines = [f"{shard}: record {index}{of}{in_split} ({names_from})"]
    if described["problem"]:
        lines.append(f"damaged: {described['problem']} (python -m beam_pipeline verify checks all)")
    features = described["features"]
    for key, values in features.items():
        if key == F.ENCODED and all(isinstance(summary, dict) for summary in values):
            text = "; ".join(_image_text(summary) for summary in values)
        elif key == F.LABEL and values:
            text = f"{values[0]} ({described['label']['name']})"
        elif key in _SCALARS and len(values) == 1:
            text = str(values[0]) if values[0] != "" else '""'
        else:
            text = json.dumps(values, ensure_ascii=False)
        schema = "" if key in {f.key for f in FEATURES} else "  (not in the schema)"
        lines.append(f"{key}: {text}{schema}")
    lines += [f"{key}: (missing)" for key in described["missing"]]
    width, height = described["size"]
    objects = described["objects"]
    lines.append(
        f"objects: {len(objects)} (boxes [xmin, ymin, xmax, ymax], relative, then in pixels of "
        f"the stored image, {width} wide x {height} high)"
    )
    for i, obj in enumerate(objects):
        text = "" if obj["text"] == obj["name"] else f", text {obj['text']!r}"
        box = ", ".join(map(str, obj["box"]))
        pixels = ", ".join(map(str, obj["box_pixels"]))
        lines.append(
            f"  {i}: {obj['name']} (label {obj['label']}{text}) box [{box}] "
            f"pixels [{pixels}] difficult {obj['difficult']} truncated {obj['truncated']}"
        )
    return lines


def _image_text(summary: dict[str, Any]) -> str:
    text = f"{summary['num_bytes']:,} bytes of {summary['format']}"
    if "error" in summary:
        text += f", does not decode ({summary['error']})"
    else:
        text += f", {summary['width']} wide x {summary['height']} high {summary['mode']}"
    return f"{text}, sha256 {summary['sha256']}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_once(_parser(), argv)
    try:
        if _is_build(args):
            text = _inspect_build(args)
        elif args.split is not None and not file_exists(args.shard):
            raise UsageError(f"{args.shard} does not exist: --split reads a build's directory")
        elif args.split is not None and not args.shard.endswith(SHARD_SUFFIX):
            raise UsageError(
                f"{args.shard} is a file, not a build: --split reads a build's directory"
            )
        elif args.split is not None:
            raise UsageError(
                f"--split finds a record in a build's directory; {args.shard} is one shard "
                f"file: drop --split, or name its directory ({shard_directory(args.shard)})"
            )
        else:
            index, record, _ = find_record(args.shard, args.index, args.filename)
            info = shard_build_info(args.shard)
            described = describe_record(record, info, args.shard, index)
            payload = record_payload(args.shard, index, info, described)
            lines = format_text(args.shard, index, info, described)
            text = to_json(payload) if args.json else "\n".join(lines)
    except (UsageError, LookupError, CorruptRecordError, OSError, ValueError) as error:
        return _failed(error, args.shard)
    print(text)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline inspect", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "shard", metavar="SHARD", help="A .tfrecord file, or a build's directory (local or gs://)."
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--index", type=int, help="The record's position (default 0; -1: last).")
    name = "The record whose image/filename is NAME or ends /NAME."
    which.add_argument("--filename", metavar="NAME", type=nonblank, help=name)
    parser.add_argument(
        "--split",
        metavar="SPLIT",
        help="In a build's directory: the split whose --index N-th record to print, or to "
        "search for --filename (default: every split).",
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    return parser


def _failed(error: Exception, path: str) -> int:
    """Says why the command stopped; its exit code (2 for bad arguments, else 1)."""
    if isinstance(error, (UsageError, RequestError)):
        print(f"error: {error}", file=sys.stderr)
        return 2
    if isinstance(error, CorruptShardError):  # a shard of a build
        print(
            f"error: {error.path} is corrupt: {error}; run python -m beam_pipeline verify {path}",
            file=sys.stderr,
        )
    elif (
        isinstance(error, CorruptRecordError)
        and error.offset == 0
        and "length" in error.problem
        and not path.endswith(SHARD_SUFFIX)  # (a shard whose first bytes are damaged)
    ):
        print(
            f"error: {path} is not a TFRecord file ({error}): inspect reads a shard of a build "
            "(NAME.tfrecord) or the build's directory",
            file=sys.stderr,
        )
    elif isinstance(error, CorruptRecordError):
        print(f"error: {path} is corrupt: {error}", file=sys.stderr)
    elif isinstance(error, FileNotFoundError) and error.filename not in (None, path):
        # a shard the build lists
        print(
            f"error: {error.filename} is missing: the build in {path} is damaged; run "
            f"python -m beam_pipeline verify {path}",
            file=sys.stderr,
        )
    else:  # NotFoundError, RecordNotFoundError, a record that is no Example...
        print(f"error: {error}", file=sys.stderr)
    return 1


def record_payload(shard: str, index: int, info: DatasetInfo | None, described: dict) -> dict:
    split, num_records = split_of_shard(shard, info)
    return {
        "shard": shard,
        "index": index,
        "split": split,
        "num_records": num_records,
        "class_names_from": "build" if info else "record",
        **described,
    }


def _is_build(args: argparse.Namespace) -> bool:
    """Whether the command names a build's directory and a record to find in it."""
    if args.filename is None and args.split is None and args.index is None:
        return False  # a directory alone: `check_shard` says what to name
    if is_local(args.shard):
        return os.path.isdir(args.shard)
    return not args.shard.endswith(SHARD_SUFFIX) and file_exists(join(args.shard, BUILD_INFO_FILE))


def _inspect_build(args: argparse.Namespace) -> str:
    """What `inspect OUT --filename NAME` or `inspect OUT --split S --index N` prints: the
    records found (as JSON, a list for --filename: an image may be in several splits)."""
    output_dir = args.shard.rstrip("/")
    try:
        info = read_build_info(output_dir)
    except NoBuildError as error:
        if is_local(output_dir) and any(map(is_shard_filename, os.listdir(output_dir))):
            check_shard(output_dir)  # shards without a build's metadata: name one of them
        raise UsageError(str(error)) from None
    found = locate(output_dir, info, filename=args.filename, split=args.split, index=args.index)
    payloads, lines = [], []
    if len(found) > 1:
        name = stored_filename(record_features(found[0].record or b""))
        splits = ", ".join(record.split for record in found)
        lines = [f"{len(found)} records have image/filename {name}, in splits {splits}"]
    for record in found:
        shard = join(output_dir, record.shard)
        described = describe_record(record.record or b"", info, shard, record.index)
        position = (record.position, info.splits[record.split].num_examples)
        payload = record_payload(shard, record.index, info, described)
        payloads.append({**payload, "split_position": position[0], "split_records": position[1]})
        lines += ["", *format_text(shard, record.index, info, described, position)]
    if args.json:
        return to_json(payloads if args.filename is not None else payloads[0])
    return "\n".join(lines[1:] if len(found) == 1 else lines)


if __name__ == "__main__":
    raise SystemExit(main())
