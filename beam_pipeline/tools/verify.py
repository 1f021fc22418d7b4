"""Re-read a committed build and check every byte of it against its metadata.

    python -m beam_pipeline verify OUT [--workers 2] [--no_decode]

For every shard in `build_info.json`: the file exists; each record's framing and CRC32C are
valid; each record is an Example with every schema key, of the right kind and length, whose
one-hot agrees with its label, class text with the metadata and boxes lie in [0, 1]; each image
decodes as RGB at its recorded size, in Pillow and in libjpeg-turbo strictly (what a build
stores); the record count, byte count and SHA-256 match the metadata. Every bad record is named
(shard, record index), with a count per shard. The metadata must agree with itself
(`check_metadata`) and with the records (`record_checks.check_tallies` and `check_schema`:
what each split's counts and the schema version say of them), the directory must hold no
shard of a split that it does not list, `rejected.jsonl` must account for the rejections it
counts, and the images `duplicates.jsonl` and `odd_images.jsonl` name must be of its records;
TFDS's files must say what `build_info.json` says (a schema 1.x build has none: `upgrade`
writes them). Exit 0 when all checks, 1 when something does not (a damaged `build_info.json`
too), 2 without a committed build or for one of a later schema than this code's
(`refuse_later_schema`).

The command, the reading of each shard and the checks of the files beside the shards; what is
checked in each record is `record_checks`'s (`check_example`).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.arguments import parse_once
from beam_pipeline.console.summary import human_bytes, plural
from beam_pipeline.core.quality import duplicates, odd_images
from beam_pipeline.core.record_checks import (
    Tally,
    check_example,
    check_schema,
    check_tallies,
    stored_names,
)
from beam_pipeline.core.rejections import read_dead_letter
from beam_pipeline.output.directory import STAGING_DIR, list_shard_files, work_folders
from beam_pipeline.output.lock import busy_reason
from beam_pipeline.output.readback import read_build_info, refuse_later_schema
from beam_pipeline.tree.layouts import vocabulary_split
from schemas import (
    BUILD_INFO_FILE,
    DEAD_LETTER_FILE,
    DUPLICATES_FILE,
    LABELS_FILE,
    LEGACY_INFO_FILE,
    ODD_IMAGES_FILE,
    SCHEMA_VERSION,
    SHARD_SUFFIX,
    DamagedBuildError,
    DatasetInfo,
    ShardInfo,
)
from schemas.features import version_key
from schemas.label_map import LABEL_MAP_CSV_FILE, LABEL_MAP_FILE, label_map_csv, label_map_text
from schemas.metadata import disagreements
from schemas.paths import join
from schemas.tfds_metadata import tfds_files
from schemas.tfrecord import CorruptRecordError, read_records


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a shard; `record` is None for whole-file problems."""

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


def verify_shard(
    data_dir: str,
    shard: ShardInfo,
    num_classes: int,
    decode: bool = True,
    labelled: bool = True,
    schema_version: str = SCHEMA_VERSION,
    classes: Sequence[str] = (),
) -> tuple[list[Problem], Tally]:
    """Checks one shard: every problem found in it, in record order, and the `Tally` of its
    records."""
    tally = Tally()
    path = join(data_dir, shard.file)
    if not FileSystems.exists(path):
        return [Problem(shard.file, None, "missing")], tally
    count, problems = 0, []
    try:
        opened = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except OSError as error:  # (a directory of its name: a traceback, from a trial)
        return [Problem(shard.file, None, f"cannot be read: {_why(error)}")], tally
    with opened as stream:
        reader = _HashingReader(stream)
        try:
            for count, record in enumerate(read_records(reader), start=1):
                problem = check_example(
                    record, num_classes, decode, labelled, schema_version, classes, tally
                )
                if problem:
                    problems.append(Problem(shard.file, count - 1, problem))
        except CorruptRecordError as error:
            message = f"{error.problem} (byte {error.offset}); the records after it cannot be read"
            return [*problems, Problem(shard.file, error.index, message)], tally
    if count != shard.num_examples:
        whole = f"{count} records, the build's metadata says {shard.num_examples}"
    elif reader.num_bytes != shard.num_bytes:
        whole = f"{reader.num_bytes} bytes, expected {shard.num_bytes}"
    elif reader.digest.hexdigest() != shard.sha256:
        whole = "SHA-256 differs from the build's metadata"
    else:
        return problems, tally
    return [*problems, Problem(shard.file, None, whole)], tally


def verify(data_dir: str, workers: int = 1, decode: bool = True) -> tuple[int, list[Problem]]:
    """Checks every shard of every split; returns (shards checked, problems in shard order)."""
    info = read_build_info(data_dir, sums=False)  # its disagreements: check_metadata
    refuse_later_schema(data_dir, info, "verify")
    shards = [
        (name, shard, split.labelled)
        for name, split in sorted(info.splits.items())
        for shard in split.shards
    ]
    args = [
        (data_dir, shard, info.num_classes, decode, labelled, info.schema_version, info.classes)
        for _, shard, labelled in shards
    ]
    if workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(verify_shard, *zip(*args, strict=True)))
    else:
        results = [verify_shard(*a) for a in args]
    has_build_info = FileSystems.exists(join(data_dir, BUILD_INFO_FILE))
    metadata = BUILD_INFO_FILE if has_build_info else LEGACY_INFO_FILE  # a schema 1.x build
    problems = check_metadata(info, metadata)
    written = collections.Counter[str]()
    for _, tally in results:
        written.update(tally.schemas)
    if schema := check_schema(info, written):  # (then the records' schema is held to the rest)
        problems.append(Problem(metadata, None, schema))
        info = dataclasses.replace(info, schema_version=max(written, key=version_key))
    problems += [problem for found, _ in results for problem in found]
    tallies = {name: Tally() for name in info.splits}
    for (name, _, _), (found, tally) in zip(shards, results, strict=True):
        if found:  # (a split with a bad record: its counts are not all known)
            tallies.pop(name, None)
        elif name in tallies:
            tallies[name].merge(tally)
    problems += [
        Problem(metadata, None, f"split {name!r}: {message}")
        for name, tally in sorted(tallies.items())
        for message in check_tallies(info, name, tally)
    ]
    problems += check_stray_shards(data_dir, info, metadata)
    problems += check_rejections(data_dir, info, metadata)
    problems += check_class_files(data_dir, info)
    problems += check_copies(data_dir, info, tallies)
    if has_build_info:
        problems += check_tfds_metadata(data_dir, info)
    return len(shards), problems


# The schema whose builds first wrote each label map (a trial's: verify failed intact 1.x builds).
_SINCE = {LABEL_MAP_FILE: "1.2.0", LABEL_MAP_CSV_FILE: "2.1.0"}


def check_class_files(data_dir: str, info: DatasetInfo) -> list[Problem]:
    """Problems with `labels.txt` (line i: class i) and the Object Detection API's label maps:
    missing (`upgrade` writes the label maps; an older build's, never written, are not),
    unreadable, or not the classes of the build's metadata (two classes swapped, a name
    edited: a reader of the file would name labels wrongly)."""
    expected = {
        LABELS_FILE: "".join(name + "\n" for name in info.classes),
        LABEL_MAP_FILE: label_map_text(info.classes, info.display_names),
        LABEL_MAP_CSV_FILE: label_map_csv(info.classes),
    }
    upgrade = f"run python -m beam_pipeline upgrade {data_dir}"
    problems = []
    for name, text in expected.items():
        path = join(data_dir, name)
        rewrite, fix = upgrade, f"delete it and {upgrade}"
        if name == LABELS_FILE:
            rewrite = fix = "write it again from the metadata's class list, one class a line"
        if not FileSystems.exists(path):
            if version_key(info.schema_version) >= version_key(_SINCE.get(name, "0")):
                problems.append(Problem(name, None, f"missing; {rewrite}"))
            continue
        try:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
                found = stream.read().decode("utf-8", errors="replace")
        except OSError as error:
            problems.append(Problem(name, None, f"cannot be read: {_why(error)}; {fix}"))
            continue
        if found != text:
            said = "disagrees with the build's metadata on the classes (a reader of it would "
            problems.append(Problem(name, None, f"{said}name labels wrongly); {fix}"))
    return problems


def _why(error: OSError) -> str:
    """The file system's words for `error`: "Is a directory"."""
    return error.strerror or str(error)


def check_metadata(info: DatasetInfo, name: str = BUILD_INFO_FILE) -> list[Problem]:
    """The metadata's own sums, where they disagree (`schemas.metadata.disagreements`)."""
    return [Problem(name, None, message) for message in disagreements(info)]


def check_stray_shards(
    data_dir: str, info: DatasetInfo, metadata: str = BUILD_INFO_FILE
) -> list[Problem]:
    """Record files (`*.tfrecord`) that the metadata does not list: a glob such as
    `train-*.tfrecord` (the readers of "Reading the records elsewhere") would read them, and
    TFDS's own reader those of a split the metadata no longer names."""
    listed = info.shard_files
    (found,) = FileSystems.match([join(data_dir, f"*{SHARD_SUFFIX}")])
    names = sorted(m.path.rsplit("/", 1)[-1] for m in found.metadata_list)
    return [
        Problem(
            name,
            None,
            f"not a shard of this build ({metadata} does not list it), but a glob "
            f"such as {_glob_reading(name, info)} reads it: delete it",
        )
        for name in names
        if name not in listed
    ]


def _glob_reading(name: str, info: DatasetInfo) -> str:
    """`train-*.tfrecord` for a file named after a split of `info`, else `*.tfrecord`."""
    split = name.split("-", 1)[0]
    return (
        f"{split}-*{SHARD_SUFFIX}" if "-" in name and split in info.splits else f"*{SHARD_SUFFIX}"
    )


def check_rejections(
    data_dir: str, info: DatasetInfo, metadata: str = BUILD_INFO_FILE
) -> list[Problem]:
    """`rejected.jsonl` against the metadata: per split, its image lines are `num_rejected`,
    and its reasons are `failures`."""
    path = join(data_dir, DEAD_LETTER_FILE)
    if not FileSystems.exists(path):
        return [Problem(DEAD_LETTER_FILE, None, "missing: the account of rejected files is lost")]
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        text = stream.read().decode("utf-8", errors="replace")
    try:
        lines = read_dead_letter(text)
    except ValueError as error:
        return [Problem(DEAD_LETTER_FILE, None, f"not the lines a build writes ({error})")]
    images = collections.Counter(line["split"] for line in lines if line["is_image"])
    reasons = collections.Counter(line["reason"] for line in lines)
    problems = []
    for name, split in sorted(info.splits.items()):
        if images.get(name, 0) != split.num_rejected:
            problems.append(
                Problem(
                    DEAD_LETTER_FILE,
                    None,
                    f"names {plural(images.get(name, 0), 'rejected image')} of split "
                    f"{name!r}, {metadata} counts {split.num_rejected}",
                )
            )
    if dict(reasons) != dict(info.failures):
        problems.append(
            Problem(
                DEAD_LETTER_FILE,
                None,
                f"its reasons {dict(sorted(reasons.items()))} are not {metadata}'s "
                f"failures {dict(sorted(info.failures.items()))}",
            )
        )
    return problems


def _json_lines(data_dir: str, name: str) -> list[dict] | Problem:
    """The JSON objects of a build's `name` (one per line), or the Problem with it."""
    path = join(data_dir, name)
    if not FileSystems.exists(path):
        return Problem(name, None, "missing: the build recorded what it lists")
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        text = stream.read().decode("utf-8", errors="replace")
    try:
        lines = [json.loads(line) for line in text.splitlines()]
    except ValueError as error:
        return Problem(name, None, f"not the JSON lines a build writes ({error})")
    if not all(isinstance(line, dict) for line in lines):
        return Problem(name, None, "not the JSON objects a build writes")
    return lines


def check_copies(data_dir: str, info: DatasetInfo, tallies: dict[str, Tally]) -> list[Problem]:
    """`duplicates.jsonl` and `odd_images.jsonl` against the metadata's counts, for a build
    that looked for copies (`--duplicates`); and the images they name (a group's members, an
    odd image) against the records of the splits `tallies` counts (`duplicates.unstored`)."""
    if not info.duplicates:
        return [
            Problem(
                name,
                None,
                f"is here, but {BUILD_INFO_FILE} records no search for copies "
                "(an earlier build's report: delete it, or rebuild with --duplicates report)",
            )
            for name in (DUPLICATES_FILE, ODD_IMAGES_FILE)
            if FileSystems.exists(join(data_dir, name))
        ]
    read = {name: _json_lines(data_dir, name) for name in (DUPLICATES_FILE, ODD_IMAGES_FILE)}
    problems = [lines for lines in read.values() if isinstance(lines, Problem)]
    found = {name: lines for name, lines in read.items() if isinstance(lines, list)}
    dead = _json_lines(data_dir, DEAD_LETTER_FILE)  # (what is wrong with it: check_rejections)
    rejected = dead if isinstance(dead, list) else []
    stored, policy = stored_names(tallies, info.splits), info.options.get("duplicates")
    if DUPLICATES_FILE in found:
        wrong = duplicates.report_problems(
            found[DUPLICATES_FILE], info.duplicates, vocabulary_split(list(info.splits))
        )
        wrong += duplicates.unstored_members(found[DUPLICATES_FILE], stored, rejected, policy)
        problems += [Problem(DUPLICATES_FILE, None, message) for message in wrong]
    if ODD_IMAGES_FILE in found:
        odd = found[ODD_IMAGES_FILE]
        wrong = odd_images.count_problems(odd, dict(info.odd_images), BUILD_INFO_FILE)
        wrong += odd_images.unstored_images(odd, stored, rejected, policy)
        problems += [Problem(ODD_IMAGES_FILE, None, message) for message in wrong]
    return problems


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
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="Processes that check shards at once (default: one per core).",
    )
    parser.add_argument("--no_decode", action="store_true", help="Skip decoding the images.")
    args = parse_once(parser, argv)
    if not 1 <= args.workers <= 4 * (os.cpu_count() or 1):
        parser.error(f"--workers {args.workers}: give 1 to {4 * (os.cpu_count() or 1)} processes")
    try:
        num_shards, problems = verify(args.data_dir, args.workers, not args.no_decode)
    except DamagedBuildError as error:
        print(f"FAIL {error}")
        return 1
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        per_file = collections.Counter(problem.file for problem in problems)
        if len(problems) > len(per_file):
            for name, count in sorted(per_file.items()):
                print(f"  {name}: {plural(count, 'problem')}")
        print(
            f"{plural(len(problems), 'problem')} in {plural(len(per_file), 'file')} "
            f"({plural(num_shards, 'shard')} checked)"
        )
        return 1
    print(f"OK: {plural(num_shards, 'shard')} verified")
    if not FileSystems.exists(join(args.data_dir, BUILD_INFO_FILE)):
        print(
            f"note: a build of schema 1.x, whose metadata TFDS cannot read; python -m "
            f"beam_pipeline upgrade {args.data_dir} adds TFDS's files and the label maps of "
            "later builds (shards untouched)"
        )
    if staged := list_shard_files(args.data_dir, staged=True):
        held = f"{join(args.data_dir, STAGING_DIR)} holds {plural(len(staged), 'shard')} "
        held += f"({human_bytes(sum(staged.values()))}) of a rebuild"
        if busy_reason(args.data_dir):  # (the rebuild's lock: it runs)
            print(f"note: {held} under way (a build holds the directory's lock)")
        else:
            print(
                f"note: {held} that stopped; rerun its command with --overwrite --resume to "
                "finish it, or delete the folder"
            )
    elif not busy_reason(args.data_dir) and (left := work_folders(args.data_dir)):
        print(
            f"note: {'/, '.join(left)}/: work folders a build left when it stopped (the build "
            f"verified is whole); python -m beam_pipeline upgrade {args.data_dir} removes "
            "them, or a rebuild with --overwrite"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
