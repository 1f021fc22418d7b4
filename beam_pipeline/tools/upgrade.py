"""Bring a committed build's metadata up to this version, without touching a shard.

    python -m beam_pipeline upgrade OUT

A build made before schema 2.0 keeps its metadata in `dataset_info.json`, the file name TFDS
reads its own metadata from, so `tfds.builder_from_directory(OUT)` cannot read it. `upgrade`
writes what a build of this version has beside its shards: `label_map.pbtxt` (builds before
1.2 have none), TFDS's `features.json` and class-name files, `build_info.json` (the same
metadata under its new name, keeping the schema version its records were written with), and,
last, TFDS's `dataset_info.json` in place of the old file. A crash half-way leaves a build that
reads as before; running `upgrade` again finishes it. On a build of schema 2.x it rewrites
TFDS's files (what `verify` asks for when they are missing or disagree) for the schema its
records have: a 2.0 build's `features.json` names no `image/object/view`, which its records
lack (the views come from the XML: rebuild for them). It also finishes the commit of a rebuild
that stopped after its `build_info.json` (what the build's stop line says): TFDS's files, then
the commit's work folders. Records and shards are never read or written: run `verify` for them.

Exit code 0 when the metadata is written, 2 when OUT holds no committed build or one of a later
schema than this code's (its TFDS files would lose what that schema added).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.arguments import parse_once
from beam_pipeline.output.commit import commit_stage
from beam_pipeline.output.directory import (
    PROGRESS_DIR,
    STAGING_DIR,
    TEMP_DIR,
    remove_empty_temp_dir,
    remove_work_dirs,
    write_atomic,
)
from beam_pipeline.output.lock import busy_reason
from beam_pipeline.output.readback import read_build_info, refuse_later_schema
from schemas import BUILD_INFO_FILE, DatasetInfo
from schemas.label_map import LABEL_MAP_CSV_FILE, LABEL_MAP_FILE, label_map_csv, label_map_text
from schemas.paths import is_local, join
from schemas.tfds_metadata import TFDS_INFO_FILE, tfds_files


def upgrade(output_dir: str) -> tuple[DatasetInfo, list[str]]:
    """Writes the metadata files of this version; returns the build's info and the files written.

    Raises:
      NoBuildError: OUT holds no committed build.
      ValueError: its metadata is of a schema this code cannot read, or of a later minor one.
    """
    info = read_build_info(output_dir, sums=False)  # (verify lists what disagrees)
    refuse_later_schema(output_dir, info, "upgrade")
    for folder in (TEMP_DIR, PROGRESS_DIR, STAGING_DIR):
        path = join(output_dir, folder)
        if is_local(path) and os.path.lexists(path) and not os.path.isdir(path):
            raise ValueError(  # (its files are written through .tmp/: a traceback, in a trial)
                f"{path} is a file, not a work folder of the build: delete it, then rerun upgrade"
            )
    written = []
    label_maps = {
        LABEL_MAP_FILE: label_map_text(info.classes, info.display_names),
        LABEL_MAP_CSV_FILE: label_map_csv(info.classes),
    }
    for name, text in label_maps.items():
        if not FileSystems.exists(join(output_dir, name)):
            write_atomic(output_dir, name, text.encode("utf-8"))
            written.append(name)
    files = tfds_files(info)
    tfds_info = files.pop(TFDS_INFO_FILE)
    for name, text in files.items():
        write_atomic(output_dir, name, text.encode("utf-8"))
        written.append(name)
    if not FileSystems.exists(join(output_dir, BUILD_INFO_FILE)):
        write_atomic(output_dir, BUILD_INFO_FILE, info.to_json().encode("utf-8"))
        written.append(BUILD_INFO_FILE)
    # Last: until here a schema 1.x build's own metadata is still in this file.
    write_atomic(output_dir, TFDS_INFO_FILE, tfds_info.encode("utf-8"))
    written.append(TFDS_INFO_FILE)
    finish_stopped_commit(output_dir)
    if busy_reason(output_dir) is None:  # (a build that holds the directory writes there)
        remove_empty_temp_dir(output_dir)
    return info, written


def finish_stopped_commit(output_dir: str) -> None:
    """Removes the work folders a commit left when it stopped after writing `build_info.json`
    (a rebuild's stage record says it was moving the shards in; a first build's progress
    records and temp files, with no staged shard), unless a build holds the directory. A
    stopped rebuild's staged shards, kept for --overwrite --resume, are left alone."""
    if busy_reason(output_dir) is not None:
        return
    if commit_stage(output_dir) == "moving" or not FileSystems.exists(
        join(output_dir, STAGING_DIR)
    ):
        remove_work_dirs(output_dir)


def main(argv: Sequence[str] | None = None) -> int:
    first, _, what, *_ = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline upgrade", description=first, epilog=what
    )
    parser.add_argument("output_dir", metavar="OUT", help="the output directory of a build")
    args = parse_once(parser, argv)
    try:
        info, written = upgrade(args.output_dir)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"{args.output_dir}: wrote {', '.join(written)} (records of schema "
        f"{info.schema_version}, unchanged); tfds.builder_from_directory({args.output_dir!r}) "
        "reads it"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
