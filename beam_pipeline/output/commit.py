"""Committing a build: its shards checked, the old build retired, the staged shards moved in,
the metadata written, the commit marker last (the directory's layout: `directory.py`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.core.rejections import Rejection
from beam_pipeline.failures import BuildFailed
from beam_pipeline.interrupts import refuse_if_interrupted
from beam_pipeline.output.directory import (
    COMMITTING,
    TEMP_DIR,
    list_shard_files,
    move_in,
    remove_work_dirs,
    retire_build,
    shard_dir,
    write_atomic,
)
from schemas import (
    BUILD_INFO_FILE,
    DEAD_LETTER_FILE,
    LABELS_FILE,
    DatasetInfo,
    is_shard_filename,
)
from schemas.label_map import LABEL_MAP_CSV_FILE, LABEL_MAP_FILE, label_map_csv, label_map_text
from schemas.paths import join
from schemas.tfds_metadata import TFDS_INFO_FILE, tfds_files

logger = logging.getLogger(__name__)


_RETIRING, _MOVING = b"retiring the replaced build", b"moving the staged shards in"


def write_dead_letter(output_dir: str, rejections: Iterable[Rejection], name=DEAD_LETTER_FILE):
    """Writes `rejected.jsonl` (a JSON line per rejection); first, so a failed build explains.
    `name`: its path in `output_dir` (`REBUILD_DEAD_LETTER` beside a build that is kept)."""
    dead_letter = "".join(r.to_json() + "\n" for r in rejections)
    write_atomic(output_dir, name, dead_letter.encode("utf-8"))


# Where a rebuild puts its `rejected.jsonl` until its commit moves it into place: the complete
# build it replaces keeps its own until then, and keeps it when the rebuild fails.
REBUILD_DEAD_LETTER = f"{TEMP_DIR}/{DEAD_LETTER_FILE}"


def check_shard_files(
    output_dir: str, info: DatasetInfo, *, staged: bool = False
) -> dict[str, int]:
    """Raises BuildFailed unless every shard of `info` is in place with its recorded size;
    returns the listing (`list_shard_files`), for `commit`.

    With `staged`, in `.staged/`, or, once a commit that stopped had retired the old build
    and begun moving the shards (a runner retrying the step), in the output itself.
    """
    sizes = list_shard_files(output_dir, staged=staged)
    if staged and _commit_stage(output_dir) == _MOVING:
        sizes = {**list_shard_files(output_dir), **sizes}
    for split_info in info.splits.values():
        for shard in split_info.shards:
            if sizes.get(shard.file) != shard.num_bytes:
                found = sizes.get(shard.file, "no file")
                raise BuildFailed(f"{shard.file}: expected {shard.num_bytes} bytes, found {found}")
    return sizes


def commit_stage(output_dir: str) -> str | None:
    """How far a rebuild's commit that stopped got: "retiring" (the old build may be partly
    deleted), "moving" (it is deleted; the staged shards are being moved in), or None (no
    staged commit began, or it finished)."""
    stage = _commit_stage(output_dir)
    return {_RETIRING: "retiring", _MOVING: "moving"}.get(stage) if stage else None


def _commit_stage(output_dir: str) -> bytes | None:
    path = join(output_dir, COMMITTING)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        return stream.read()


def committed_already(output_dir: str, info: DatasetInfo) -> bool:
    """Whether `info` is the build committed in `output_dir` and none of its shards waits in
    `.staged/`: a runner retrying a staged commit that had finished. (A rebuild whose
    metadata is the old build's, byte for byte, still has its shards staged: it commits.)"""
    try:
        with FileSystems.open(
            join(output_dir, BUILD_INFO_FILE), compression_type=CompressionTypes.UNCOMPRESSED
        ) as stream:
            if stream.read() != info.to_json().encode("utf-8"):
                return False
    except OSError:
        return False
    staged = list_shard_files(output_dir, staged=True)
    return not any(shard.file in staged for split in info.splits.values() for shard in split.shards)


def _move_staged_build(output_dir: str, info: DatasetInfo) -> None:
    """Retires the build a rebuild replaces and moves the rebuild's staged shards and
    `rejected.jsonl` in. Each stage is recorded first, so a retried commit neither deletes a
    shard it moved nor retires twice; renames (on Cloud Storage, copies and deletes)."""
    if _commit_stage(output_dir) != _MOVING:
        remove_other_shards(output_dir, info, staged=True)
        write_atomic(output_dir, COMMITTING, _RETIRING)
        # The old shards of the new ones' names stay until the move replaces them.
        retire_build(output_dir, replaced=info.shard_files)
        write_atomic(output_dir, COMMITTING, _MOVING)
    staged = list_shard_files(output_dir, staged=True)
    names = [
        shard.file
        for split in info.splits.values()
        for shard in split.shards
        if shard.file in staged
    ]
    move_in(output_dir, names)
    FileSystems.rename(
        [join(output_dir, REBUILD_DEAD_LETTER)], [join(output_dir, DEAD_LETTER_FILE)]
    )


def remove_other_shards(
    output_dir: str, info: DatasetInfo, listed: dict[str, int] | None = None, *, staged=False
) -> None:
    """Deletes the shard files that are not `info`'s: those an interrupted build with other
    options left (`--resume` keeps what is there), which a glob such as `train-*.tfrecord`
    would read beside this build's. `listed`: the directory's `list_shard_files`, if known;
    `staged`: those in `.staged/`."""
    listed = list_shard_files(output_dir, staged=staged) if listed is None else listed
    ours = info.shard_files
    others = sorted(name for name in listed if is_shard_filename(name) and name not in ours)
    if others:
        logger.info(
            "Removing %d shard files that are not this build's: %s", len(others), ", ".join(others)
        )
        FileSystems.delete([join(shard_dir(output_dir, staged), name) for name in others])


def commit(
    output_dir: str,
    info: DatasetInfo,
    listed: dict[str, int] | None = None,
    *,
    staged: bool = False,
    files: dict[str, bytes] | None = None,
) -> None:
    """Deletes shard files that are not `info`'s, then writes `labels.txt`, `label_map.pbtxt`,
    TFDS's metadata but its `dataset_info.json`, then `build_info.json` (the commit marker of
    this project's readers) and, last, `dataset_info.json` (TFDS's: a crash before it leaves a
    directory TFDS refuses, not one it reads as complete); clears work dirs. `listed`: the
    shard listing `check_shard_files` returned, so the directory is listed once.

    With `staged` (a rebuild that replaces a complete build), the old build is deleted first,
    its commit markers before anything else, and then the staged shards and the rebuild's
    `rejected.jsonl` are moved into place (`_move_staged_build`): renames, so locally the
    directory holds no build only for the moment this takes; a crash then leaves no commit
    marker, a retried commit goes on where it stopped, and `--resume` keeps every shard.
    `files`: more of the build's own files (`duplicates.jsonl`), written with the labels.

    Raises:
      KeyboardInterrupt: a Ctrl-C reached this process earlier and was swallowed on the way.
    """
    refuse_if_interrupted()
    if staged:
        _move_staged_build(output_dir, info)
    else:
        remove_other_shards(output_dir, info, listed)
    labels = "".join(name + "\n" for name in info.classes)
    write_atomic(output_dir, LABELS_FILE, labels.encode("utf-8"))
    for name, data in (files or {}).items():
        write_atomic(output_dir, name, data)
    label_map = label_map_text(info.classes, info.display_names)
    write_atomic(output_dir, LABEL_MAP_FILE, label_map.encode("utf-8"))
    write_atomic(output_dir, LABEL_MAP_CSV_FILE, label_map_csv(info.classes).encode("utf-8"))
    tfds = tfds_files(info)
    tfds_marker = tfds.pop(TFDS_INFO_FILE)
    for name, text in tfds.items():
        write_atomic(output_dir, name, text.encode("utf-8"))
    write_atomic(output_dir, BUILD_INFO_FILE, info.to_json().encode("utf-8"))
    write_atomic(output_dir, TFDS_INFO_FILE, tfds_marker.encode("utf-8"))
    remove_work_dirs(output_dir)
