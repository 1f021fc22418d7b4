"""Progress records: what `--resume` needs to trust a shard left by an interrupted build.

After a shard is renamed into place its writer records, in `OUT/.progress/<shard>.json`, a
fingerprint of everything that decides the shard's bytes (schema version, split and shard
numbers, vocabulary, image policy, every member's index record and rank, and under
`--duplicates drop_leaks` the training prints a held-out shard was checked against), the shard's
result, and the inputs the writer rejected. On `--resume` a shard is kept only if its record
exists, its fingerprint matches the new plan and the file still has the recorded size and
SHA-256; otherwise it is written again. Image bytes themselves are not fingerprinted: an image
changed since the interrupted run is told by its size, its inode (another file at its path: a
link pointed elsewhere, folders swapped) and its status change time (ctime) from the listing
(`IndexEntry.file_version`): any write, replacement, `chmod` or `chown` sets it, and
no user can put an old one back (`cp -p` and `touch -r` restore the modification time, which
rsync and make trust, not the ctime; FAT and exFAT keep none, Linux reports another of their
times for it, as some FUSE mounts do: docs/watching-and-crashes.md says so). A tree copied
elsewhere, rsync -a too, is new to it.
A record that cannot be read as one (another version's, a damaged one) counts as absent.
Finalize deletes the records once the build is committed; `output` owns their directory.

What a resumed build kept, for its summary (`shards_in_place` before it writes, `kept_shards`
once it committed): a kept shard is the very file the interrupted attempt left, never written
again (a shard written anew reaches its name by a rename from `.tmp/`: another file).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.core.entries import LabelledEntry, ShardResult
from beam_pipeline.core.images import ImagePolicy
from beam_pipeline.core.labels import Vocabulary
from beam_pipeline.core.quality.duplicates import ImagePrint
from beam_pipeline.core.rejections import Rejection
from beam_pipeline.output.directory import PROGRESS_DIR, STAGING_DIR, write_atomic
from beam_pipeline.stages.coders import LabelledEntryCoder
from beam_pipeline.tree.fileio import sha256_of
from schemas import SCHEMA_VERSION, SHARD_SUFFIX, DatasetInfo, ShardInfo
from schemas.paths import is_local, join

# What a shard's progress record holds of its images' prints (`save`); a record of another
# version is not resumed from. 2: the source's width and height (the stored ones before).
PRINTS_VERSION = 2


def fingerprint(
    split: str,
    index: int,
    num_shards: int,
    members: Sequence[tuple[int, LabelledEntry]],
    vocabulary: Vocabulary,
    policy: ImagePolicy,
    drops_copies: str | None = None,
) -> str:
    """A hash of everything that decides a shard's bytes except the image bytes themselves
    (`drops_copies`: of a held-out shard that leaves out copies of training images, the
    `TrainingCopies.digest` of the training prints it checks them against)."""
    digest = hashlib.sha256()
    header = [SCHEMA_VERSION, split, index, num_shards, list(vocabulary.classes)]
    header.append(dataclasses.asdict(policy))
    if policy.fingerprints:  # the prints a kept shard's record holds: their sizes the source's
        header.append(f"prints {PRINTS_VERSION}")
    if drops_copies is not None:
        header.append(f"drop_leaks {drops_copies}")
    digest.update(json.dumps(header, sort_keys=True).encode("utf-8"))
    coder = LabelledEntryCoder()
    for rank, labelled in members:
        encoded = coder.encode(labelled)
        digest.update(rank.to_bytes(8, "big") + len(encoded).to_bytes(4, "big") + encoded)
    return digest.hexdigest()


def _record_name(shard_file: str) -> str:
    return f"{PROGRESS_DIR}/{shard_file}.json"


def save(
    output_dir: str,
    shard_fingerprint: str,
    result: ShardResult,
    rejections: Sequence[Rejection],
    prints: Sequence[ImagePrint],
    input_dir: str,
) -> None:
    """Records a shard that is in place, with the rejections its writer made (their paths in
    `input_dir`) and the prints of its images (a kept shard is not decoded again: its copies
    are found from these)."""
    record = {
        "fingerprint": shard_fingerprint,
        "input_dir": input_dir,
        "result": dataclasses.asdict(result),
        "rejections": [dataclasses.asdict(r) for r in rejections],
        "prints": [p.to_row() for p in prints],
    }
    data = json.dumps(record).encode("utf-8")
    write_atomic(output_dir, _record_name(result.shard.file), data)


def _result_from(fields: dict[str, Any]) -> ShardResult:
    return ShardResult(
        split=fields["split"],
        index=fields["index"],
        num_shards=fields["num_shards"],
        shard=ShardInfo(**fields["shard"]),
        class_counts=tuple(tuple(pair) for pair in fields["class_counts"]),
        label_sources=tuple(tuple(pair) for pair in fields["label_sources"]),
        folder_disagreements=fields["folder_disagreements"],
        objects=tuple(tuple(pair) for pair in fields["objects"]),
        widths=tuple(tuple(pair) for pair in fields["widths"]),
        heights=tuple(tuple(pair) for pair in fields["heights"]),
    )


def load_completed(
    output_dir: str, shard_path: str, shard_fingerprint: str, input_dir: str
) -> tuple[ShardResult, list[Rejection], list[ImagePrint]] | None:
    """The recorded result, rejections and prints of an intact shard with this fingerprint,
    or None (a record without prints, an older version's, too). `shard_path`: the shard's file
    relative to `output_dir` (in `.staged/` for a rebuild). The rejections' paths are said in
    `input_dir`: the tree may have moved since (the shard holds its names relative to it)."""
    path = join(output_dir, _record_name(posixpath.basename(shard_path)))
    shard = join(output_dir, shard_path)
    if not FileSystems.exists(path) or not FileSystems.exists(shard):
        return None
    with FileSystems.open(path) as stream:
        data = stream.read()
    try:
        record = json.loads(data.decode("utf-8"))
        if record.get("fingerprint") != shard_fingerprint:
            return None
        result = _result_from(record["result"])
        # (a record of a version before the tree's place was kept: taken as not moved)
        moved = record.get("input_dir", input_dir).rstrip("/") + "/", input_dir
        rejections = [_moved(Rejection(**r), *moved) for r in record["rejections"]]
        prints = [ImagePrint.from_row(row) for row in record["prints"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if sha256_of(shard) != (result.shard.sha256, result.shard.num_bytes):
        return None
    return result, rejections, prints


def _moved(rejection: Rejection, before: str, input_dir: str) -> Rejection:
    """`rejection`, its path below the tree `before` (ending with "/") said in `input_dir`."""
    if not rejection.path.startswith(before) or before == input_dir.rstrip("/") + "/":
        return rejection
    return dataclasses.replace(rejection, path=join(input_dir, rejection.path[len(before) :]))


# A local file as a build leaves it: (device, inode, modification time in ns, size).
FileIdentity = tuple[int, int, int, int]


class Kept(NamedTuple):
    """The shards a resumed build kept from the interrupted one, and their examples."""

    shards: int
    images: int


def _identity(path: str) -> FileIdentity | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size


def shards_in_place(output_dir: str) -> dict[str, set[FileIdentity]] | None:
    """Before a `--resume` build writes: the identity of each shard file in `output_dir` and in
    its `.staged/` (where a rebuild of a complete build keeps them), by file name. None for an
    output that is not local (an object store's copy has no identity to compare)."""
    if not is_local(output_dir):
        return None
    found: dict[str, set[FileIdentity]] = {}
    for directory in (output_dir, os.path.join(output_dir, STAGING_DIR)):
        try:
            names = [name for name in os.listdir(directory) if name.endswith(SHARD_SUFFIX)]
        except OSError:
            continue
        for name in names:
            identity = _identity(os.path.join(directory, name))
            if identity is not None:
                found.setdefault(name, set()).add(identity)
    return found


def kept_shards(
    output_dir: str, info: DatasetInfo, before: Mapping[str, set[FileIdentity]] | None
) -> Kept | None:
    """Once a `--resume` build committed: the shards of `info` that are the very files
    `shards_in_place` saw `before` it wrote (kept, moved into place at most), and their
    examples. None without `before` (no --resume, or an output that is not local)."""
    if before is None:
        return None
    kept = [
        shard
        for split in info.splits.values()
        for shard in split.shards
        if _identity(os.path.join(output_dir, shard.file)) in before.get(shard.file, ())
    ]
    return Kept(len(kept), sum(shard.num_examples for shard in kept))
