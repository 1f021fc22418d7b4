"""The output directory: its layout, preparing it, writing into it safely (its lock: `lock.py`;
the commit itself: `commit.py`).

    OUT/<split>-<i>-of-<n>.tfrecord   shards          written by the shard writers
    OUT/.tmp/                         temp files      every file is written here, then renamed
    OUT/.progress/<shard>.json        resume records  one per shard in place (see stages/resume.py)
    OUT/.staged/<shard>               a rebuild's     shards of an --overwrite, moved in at commit
    OUT/rejected.jsonl                dead letters    written first by Finalize, even on failure
    OUT/labels.txt                    class names     written once the build checks out
    OUT/label_map.pbtxt, .csv         OD API classes  then (the .csv: Model Garden's)
    OUT/features.json, image.*.labels.txt
                                      TFDS metadata   then (schemas/tfds_metadata.py)
    OUT/build_info.json               commit marker   then
    OUT/dataset_info.json             TFDS's marker   written last
    OUT/.imagenet-tfrecords           owner mark      written before anything else, kept

A build replaces or deletes the files above, so it writes into a directory only when it is
empty of them or a build made it (`refuse_foreign_files`): files of the same names that no
build wrote (another dataset's `*-00000-of-00004.tfrecord`, a `labels.txt`, a `.tmp/`) are
never touched.

Every file reaches its final name by a rename from `.tmp/` (`incomplete_file`, after TFDS's
`utils.incomplete_file`), so a crash never leaves a file under a final name that is not whole,
and the leftovers of failed attempts are in one place that the commit clears. A rebuild that
replaces a complete build (--overwrite) writes its shards into `.staged/`, so the old build
stays whole and readable until the commit: only then are its files deleted (its commit marker
first) and the new shards moved in. Paths may be local or `gs://`; all access goes through
Beam's FileSystems.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import uuid
from collections.abc import Collection, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.output.lock import OutputNotWritableError, lock_output, unlock_output
from beam_pipeline.output.readback import read_build_info
from beam_pipeline.tree.fileio import ensure_dir
from schemas import (
    BUILD_INFO_FILE,
    DEAD_LETTER_FILE,
    DUPLICATES_FILE,
    LABELS_FILE,
    LEGACY_INFO_FILE,
    ODD_IMAGES_FILE,
    SHARD_SUFFIX,
    DamagedBuildError,
    NoBuildError,
    is_shard_filename,
)
from schemas.label_map import LABEL_MAP_CSV_FILE, LABEL_MAP_FILE
from schemas.paths import first_few, is_local, join
from schemas.tfds_metadata import TFDS_FILES, TFDS_INFO_FILE

logger = logging.getLogger(__name__)

LABEL_MAP_FILES = (LABEL_MAP_FILE, LABEL_MAP_CSV_FILE)
TEMP_DIR = ".tmp"
PROGRESS_DIR = ".progress"
STAGING_DIR = ".staged"
OWNER_FILE = ".imagenet-tfrecords"
_PROBE_PREFIX = ".write-probe-"
_OWNER_TEXT = (
    b"A build of imagenet-tfrecords writes into this directory: a rebuild (--overwrite, "
    b"--resume) replaces its shards, metadata and work folders.\n"
)


class OutputExistsError(RuntimeError):
    """The output directory holds a complete build and --overwrite was not given."""


class ForeignFilesError(OutputExistsError):
    """The output directory holds files that a build would replace but no build wrote."""


def prepare_output(output_dir: str, *, overwrite: bool, resume: bool) -> bool:
    """Refuses to replace a complete build without --overwrite; clears our own stale files.

    A complete build that --overwrite replaces is kept whole until the new build commits: the
    new shards go to `.staged/` (`shard_path`), and `commit` retires the old build and moves
    them in, so a rebuild that fails or stops before its commit leaves the old build as it
    was. With --resume too, the shards an interrupted rebuild staged are kept (their progress
    records decide); otherwise its work folders are cleared now. Without a complete build, the
    leftovers of an unfinished build are deleted now (TFDS's metadata, which would describe the
    old shards, and, but with --resume, its shards and progress records).

    The launching process holds the directory's lock from here until `unlock_output`, so a
    second build into it is refused before it deletes anything.

    Returns:
      Whether a complete build is there, for the new build to stage its shards beside.

    Raises:
      OutputExistsError: a complete build is there and `overwrite` is off.
      ForeignFilesError: files a build would replace are there, and no build wrote them.
      OutputNotWritableError: the location cannot be created or written.
      OutputBusyError: another build holds the directory's lock.
    """
    complete = refuse_complete_build(output_dir, overwrite=overwrite)
    check_writable(output_dir)
    lock_output(output_dir)  # first: a build writing there is said so, not taken for foreign
    try:
        refuse_foreign_files(output_dir, complete=complete)
    except ForeignFilesError:
        unlock_output(output_dir)
        raise
    if not FileSystems.exists(join(output_dir, OWNER_FILE)):
        write_atomic(output_dir, OWNER_FILE, _OWNER_TEXT)
    if complete:
        if not resume:
            remove_work_dirs(output_dir)  # a stopped rebuild's; a build's own go at its commit
        elif FileSystems.exists(join(output_dir, COMMITTING)):
            # The complete build is the old one (its commit marker goes first), or the new one
            # (its commit stopped after build_info.json): either way this commit begins anew.
            FileSystems.delete([join(output_dir, COMMITTING)])
        return True
    _remove_build_files(output_dir, keep_shards=resume)
    if resume:
        finish_staged_moves(output_dir)
    return False


def shard_path(name: str, *, staged: bool) -> str:
    """Where a shard file is written, relative to the output directory: `.staged/` while a
    complete build it replaces is still there (`prepare_output`)."""
    return f"{STAGING_DIR}/{name}" if staged else name


_COPIES_FILES = (DUPLICATES_FILE, ODD_IMAGES_FILE)


def retire_build(output_dir: str, replaced: Collection[str] = ()) -> None:
    """Deletes the complete build that a new one replaces: the commit markers first (so a crash
    on the way leaves nothing that looks complete), then TFDS's metadata, the shards,
    `labels.txt`, the label map and `rejected.jsonl`. Not the shards named in `replaced`, which
    the new build's move replaces: a reader between its check and its open of a shard never
    finds the name gone (TensorFlow's reader, skipping errors, retries a failed open forever)."""
    markers = [join(output_dir, name) for name in (BUILD_INFO_FILE, LEGACY_INFO_FILE)]
    FileSystems.delete([path for path in markers if FileSystems.exists(path)])
    # Not the work folders: the new build's shards and dead letter are there.
    _remove_build_files(output_dir, keep_shards=False, work_dirs=False, replaced=replaced)


def _remove_build_files(
    output_dir: str,
    *,
    keep_shards: bool,
    work_dirs: bool = True,
    replaced: Collection[str] = (),
) -> None:
    """Deletes TFDS's metadata, the copies' reports and, unless `keep_shards` (--resume), the
    shards (but those named in `replaced`), labels, label map, `rejected.jsonl` and (with
    `work_dirs`) work folders of an earlier build."""
    (listing,) = FileSystems.match([join(output_dir, "*")])
    names = {m.path: m.path.rsplit("/", 1)[-1] for m in listing.metadata_list}
    # Written at the commit, only by a build that asks for them: an earlier build's would
    # describe it beside this one's metadata (TFDS's, and the copies' reports of --duplicates).
    derived = [path for path, name in names.items() if name in (*TFDS_FILES, *_COPIES_FILES)]
    if derived:
        FileSystems.delete(derived)
    if keep_shards:
        return
    stale = [
        path
        for path, name in names.items()
        if (is_shard_filename(name) and name not in replaced)
        or name in (LABELS_FILE, *LABEL_MAP_FILES, DEAD_LETTER_FILE)
    ]
    if stale:
        logger.info("Removing %d files of an earlier build from %s", len(stale), output_dir)
        FileSystems.delete(stale)
    if work_dirs:
        remove_work_dirs(output_dir)


def refuse_complete_build(output_dir: str, *, overwrite: bool) -> bool:
    """Whether a complete build is in `output_dir` (to replace); writes nothing.

    Raises:
      OutputExistsError: a complete build is there and `overwrite` is off.
    """
    what, damaged = "a complete build", False
    try:
        read_build_info(output_dir)
    except NoBuildError:
        return False
    except DamagedBuildError:
        what, damaged = f"a build whose {BUILD_INFO_FILE} is damaged", True
    except ValueError:  # metadata this code cannot read (another schema): still a build
        pass
    if not overwrite:
        staged = list_shard_files(output_dir, staged=True)
        hint = (
            f" (--overwrite --resume, with the flags of the rebuild that stopped, keeps the "
            f"{len(staged)} shard{'s' if len(staged) != 1 else ''} it staged in {STAGING_DIR}/)"
            if staged
            else ""
        )
        missing = not FileSystems.exists(join(output_dir, TFDS_INFO_FILE))
        if not staged and not damaged and missing:
            hint = (  # a build stopped between its two metadata files: only TFDS's is missing
                f"; its {TFDS_INFO_FILE} is missing (the build stopped as it committed): "
                f"python -m beam_pipeline upgrade {output_dir} writes it"
            )
        raise OutputExistsError(
            f"{output_dir} already holds {what}; pass --overwrite to replace it{hint}"
        )
    return True


def refuse_foreign_files(output_dir: str, *, complete: bool) -> None:
    """Raises ForeignFilesError when `output_dir` holds files a build would replace or delete
    (shard-named files, the metadata's names, files in the work folders) and no build
    made it. A build made it when `complete` (`refuse_complete_build` found a build there), or
    it has the owner mark, or what an unfinished build of a version before the mark left.
    Other files are never touched, so they do not matter."""
    if complete or FileSystems.exists(join(output_dir, OWNER_FILE)):
        return
    # The mark's own temp file: a build killed as it wrote the mark (before its rename).
    (marking,) = FileSystems.match([join(output_dir, TEMP_DIR, OWNER_FILE + ".*")], limits=[1])
    if marking.metadata_list or _old_build_traces(output_dir):
        return
    if foreign := files_a_build_replaces(output_dir):
        shown = first_few(foreign, 4)
        raise ForeignFilesError(
            f"{output_dir} holds files that a build would replace or delete, and no build of "
            f"imagenet-tfrecords wrote them: {shown}; choose an empty or new --output_dir, or "
            "move them away (--overwrite and --resume replace only a build's own files; if an "
            "earlier version of imagenet-tfrecords, which did not mark its directories, wrote "
            f"them: touch {join(output_dir, OWNER_FILE)} and rerun)"
        )


# The keys a build writes in a progress record, and in each line of `rejected.jsonl`.
_PROGRESS_KEYS = {"fingerprint", "result", "rejections"}
_REJECTION_KEYS = {"split", "path", "stage", "reason", "detail", "is_image"}


def _old_build_traces(output_dir: str) -> bool:
    """Whether a progress record of a shard, or the first line of `rejected.jsonl`, has the
    keys a build writes there: what an unfinished build of a version before the mark left."""
    (records,) = FileSystems.match([join(output_dir, PROGRESS_DIR, "*.json")], limits=[1])
    candidates = [(m.path, _PROGRESS_KEYS) for m in records.metadata_list]
    if FileSystems.exists(join(output_dir, DEAD_LETTER_FILE)):
        candidates.append((join(output_dir, DEAD_LETTER_FILE), _REJECTION_KEYS))
    for path, keys in candidates:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            text = stream.read().decode("utf-8", errors="replace")
        if keys is _REJECTION_KEYS:
            text = text.split("\n", 1)[0]
        try:
            if set(json.loads(text)) >= keys:
                return True
        except (ValueError, TypeError):
            continue
    return False


def files_a_build_replaces(output_dir: str) -> list[str]:
    """The names in `output_dir` a build replaces or deletes (work folders' files by their
    path in it), sorted; [] for a directory that does not exist."""
    try:
        (top,) = FileSystems.match([join(output_dir, "*")])
    except Exception:  # noqa: BLE001 - a missing directory holds nothing
        return []
    ours = {LABELS_FILE, *LABEL_MAP_FILES, DEAD_LETTER_FILE, *TFDS_FILES, *_COPIES_FILES}
    names = sorted(
        name
        for name in (m.path.rstrip("/").rsplit("/", 1)[-1] for m in top.metadata_list)
        if is_shard_filename(name) or name in ours
    )
    for folder in (TEMP_DIR, PROGRESS_DIR, STAGING_DIR):
        (inside,) = FileSystems.match([join(output_dir, folder, "**")])
        names += sorted(
            f"{folder}/{m.path[len(join(output_dir, folder)) + 1 :]}" for m in inside.metadata_list
        )
    return names


def check_writable(output_dir: str) -> None:
    """Creates the directory and writes and deletes a probe file, so a bad location fails now.

    The other probes found there are deleted too: a run killed while probing left them. One
    may be another build's, probing now; that build finds its probe gone, which says its write
    worked, and the lock then tells it it is not alone (`lock_output`).
    """
    if reason := unwritable_reason(output_dir):
        raise OutputNotWritableError(reason)
    probe = join(output_dir, f"{_PROBE_PREFIX}{uuid.uuid4().hex}")
    try:
        ensure_dir(output_dir)
        with FileSystems.create(probe) as stream:
            stream.write(b"probe")
        (found,) = FileSystems.match([join(output_dir, _PROBE_PREFIX + "*")])
        try:
            FileSystems.delete([probe])
        except Exception:  # deleted by a build probing beside this one: its write worked
            if FileSystems.exists(probe):
                raise
    except Exception as error:  # noqa: BLE001 - every file system raises its own errors
        with contextlib.suppress(Exception):  # made, then not written (a full disk)
            FileSystems.delete([probe])
        raise OutputNotWritableError(f"cannot write to {output_dir}: {error}") from None
    for stale in found.metadata_list:
        if stale.path != probe:
            with contextlib.suppress(Exception):
                FileSystems.delete([stale.path])


def unwritable_reason(output_dir: str) -> str | None:
    """Why `output_dir` could not be written, found without writing (for `plan`): a local
    path whose nearest existing directory is not writable (read-only mount, permissions) or is
    a file. None when it looks writable, and for object stores (only a write tells)."""
    if not is_local(output_dir):
        return None
    path = os.path.abspath(output_dir)
    if os.path.islink(path) and not os.path.exists(path):
        return (
            f"cannot write to {output_dir}: it is a link to {os.readlink(path)}, which does "
            "not exist (make that folder, or give another --output_dir)"
        )
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"cannot write to {output_dir}: {path} is a file, not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"cannot write to {output_dir}: {path} is not writable"
    return None


def remove_work_dirs(output_dir: str) -> None:
    """Deletes the temp files of failed attempts, the progress records, a rebuild's staged
    shards and their directories."""
    for name in (TEMP_DIR, PROGRESS_DIR, STAGING_DIR):
        _remove_dir(join(output_dir, name))


def work_folders(output_dir: str) -> list[str]:
    """The temp and progress folders of a build in `output_dir` (a committed build has none,
    but where its commit stopped before it removed them); not a local file of their name."""
    return [
        name
        for name in (TEMP_DIR, PROGRESS_DIR)
        if FileSystems.exists(path := join(output_dir, name))
        and not (is_local(path) and os.path.isfile(path))
    ]


def remove_empty_temp_dir(output_dir: str) -> None:
    """Deletes `OUT/.tmp/` when nothing is in it: what `write_atomic`'s renames leave."""
    directory = join(output_dir, TEMP_DIR)
    (match,) = FileSystems.match([join(directory, "**")])
    if not match.metadata_list and FileSystems.exists(directory):
        FileSystems.delete([directory])


def _remove_dir(directory: str) -> None:
    """Deletes `directory` and what is in it, if it is there."""
    (match,) = FileSystems.match([join(directory, "**")])
    leftovers = [m.path for m in match.metadata_list]
    if leftovers:
        FileSystems.delete(leftovers)
    if FileSystems.exists(directory):
        FileSystems.delete([directory])


@contextlib.contextmanager
def incomplete_file(output_dir: str, name: str) -> Iterator[str]:
    """Yields a temp path to write `OUT/name` through; renames it into place on success.

    The temp file is `OUT/.tmp/<base name>.<random hex>`: unique per attempt, so a retried
    bundle never collides with the attempt it replaces. When the block raises, the temp file is
    deleted (best effort; the commit clears `.tmp/` anyway) and the error propagates.
    """
    temp_dir = join(output_dir, TEMP_DIR)
    final = join(output_dir, name)
    temp = join(temp_dir, f"{posixpath.basename(name)}.{uuid.uuid4().hex}")
    ensure_dir(temp_dir)
    try:
        yield temp
        ensure_dir(posixpath.dirname(final))
        FileSystems.rename([temp], [final])
    except BaseException:
        with contextlib.suppress(Exception):
            if FileSystems.exists(temp):
                FileSystems.delete([temp])
        raise


def write_atomic(output_dir: str, name: str, data: bytes) -> None:
    """Writes `OUT/name` whole, through `incomplete_file`."""
    with (
        incomplete_file(output_dir, name) as temp,
        FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as out,
    ):
        out.write(data)


def shard_dir(output_dir: str, staged: bool) -> str:
    return join(output_dir, STAGING_DIR) if staged else output_dir


def list_shard_files(output_dir: str, *, staged: bool = False) -> dict[str, int]:
    """{file name: size} of the shard files in `output_dir` (in its `.staged/` with `staged`):
    one listing, whatever their number."""
    (match,) = FileSystems.match([join(shard_dir(output_dir, staged), "*" + SHARD_SUFFIX)])
    return {posixpath.basename(m.path): m.size_in_bytes for m in match.metadata_list}


# A staged commit's progress, in `.staged/`: what a retried commit (or --resume) must not redo.
COMMITTING = f"{STAGING_DIR}/.committing"


def finish_staged_moves(output_dir: str) -> None:
    """For --resume without a complete build: moves the shards an interrupted rebuild staged
    into the output, where the resumed build looks for them (their progress records decide
    whether they are kept), so a rebuild stopped during its commit, after the old build was
    retired, loses none."""
    staged = list_shard_files(output_dir, staged=True)
    if staged:
        logger.info("Moving %d shards an interrupted rebuild staged into place", len(staged))
        move_in(output_dir, list(staged))
    _remove_dir(join(output_dir, STAGING_DIR))


def move_in(output_dir: str, names: list[str]) -> None:
    """Renames the staged shards `names` into the output."""
    if names:
        FileSystems.rename(
            [join(output_dir, STAGING_DIR, name) for name in names],
            [join(output_dir, name) for name in names],
        )
